// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

type result struct {
	code        int
	out, errOut string
}

// cli runs the command tree in-process; interactive pretends stdin is a terminal.
func cli(t *testing.T, stdin string, interactive bool, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	a := &app{in: strings.NewReader(stdin), out: &out, errOut: &errOut, interactive: interactive}
	code := a.execute(context.Background(), args)
	return result{code, out.String(), errOut.String()}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := cli(t, "", false, "version")
	if r.code != 0 || !strings.Contains(r.out, "outbox-relay dev") || !strings.Contains(r.out, "go: go1.") {
		t.Fatalf("version: %+v", r)
	}
	// version works whatever the configuration.
	if r := cli(t, "", false, "version", "--batch-size=0"); r.code != 0 {
		t.Fatalf("version with bad config: %+v", r)
	}
}

func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	const dsn = "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x" // required; the failures below come first
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, "unknown command"},
		{[]string{"status", "--nope"}, "unknown flag: --nope"},
		{[]string{"config", "--batch-size=0"}, "relay.batch_size: must be between 1 and 10000, got 0"},
		{[]string{"config", "--poll-interval=soon"}, "poll-interval"},
		{[]string{"config", "--table=bad-name"}, "mysql.table"},
		{[]string{"config", "--log-level=loud"}, "log.level"},
		{[]string{"run", "--mysql-dsn=root:@tcp(127.0.0.1:3306)/"}, "mysql.dsn: names no database"},
		{[]string{"run"}, "mysql.dsn: missing: the relay has no default database"},
		{[]string{"migrate", "--print-sql"}, "mysql.dsn: missing"},
		{[]string{"config", "--config=/nonexistent/outbox.yaml"}, "/nonexistent/outbox.yaml"},
		{[]string{"requeue", dsn}, "--all-dead"},
		{[]string{"requeue", "--older-than=-1h", "--all-dead", dsn}, "--older-than"},
		{[]string{"dead", dsn}, "dead list"},
		{[]string{"dead", "list", "--limit=0", dsn}, "--limit"},
		{[]string{"purge", dsn}, "--older-than"},
		{[]string{"purge", "--older-than=1h", "--delete-batch-size=0", dsn}, "--delete-batch-size"},
		{[]string{"migrate", "extra-arg"}, "unknown command"},
	}
	for _, tt := range tests {
		r := cli(t, "", false, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.errOut, tt.want) {
			t.Errorf("%v: code %d, stderr %q; want 2 and %q", tt.args, r.code, r.errOut, tt.want)
		}
	}
}

func TestConfigCommandRedacts(t *testing.T) {
	t.Parallel()
	r := cli(t, "", false, "config", "--mysql-dsn=app:TopSecret@tcp(db:3306)/shop", "--nameservers=a:1,b:2", "--table=orders_outbox")
	if r.code != 0 {
		t.Fatalf("config: %+v", r)
	}
	if strings.Contains(r.out+r.errOut, "TopSecret") || !strings.Contains(r.out, "dsn: app:*****@tcp(db:3306)/shop") {
		t.Fatalf("config output leaks or lacks the masked DSN:\n%s", r.out)
	}
	for _, want := range []string{"table: orders_outbox", "- a:1", "- b:2", "batch_size: 500"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("config output lacks %q:\n%s", want, r.out)
		}
	}
}

func TestRunIsTheDefaultCommand(t *testing.T) {
	t.Parallel()
	// Both fail the same way, fast, on a database that cannot be reached.
	args := []string{"--log-level=error", "--mysql-dsn=root:@tcp(127.0.0.1:1)/x"}
	r := cli(t, "", false, args...)
	r2 := cli(t, "", false, append([]string{"run"}, args...)...)
	if r.code != exitRuntime || r.code != r2.code || !strings.Contains(r.errOut, "127.0.0.1:1") || lastError(t, r.errOut) != lastError(t, r2.errOut) {
		t.Fatalf("default %+v differs from run %+v", r, r2)
	}
}

// lastError returns the error of the last log line of s, the relay's reason for stopping.
func lastError(t *testing.T, s string) string {
	t.Helper()
	lines := jsonLines(t, s)
	if len(lines) == 0 {
		return ""
	}
	e, _ := lines[len(lines)-1]["error"].(string)
	return e
}

// healthz serves 200 on /healthz and 404 elsewhere, until the test ends.
func healthz(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()
	ok := healthz(t)
	if r := cli(t, "", false, "healthcheck", "--http-addr="+strings.TrimPrefix(ok.URL, "http://")); r.code != 0 {
		t.Fatalf("healthy: %+v", r)
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	if r := cli(t, "", false, "healthcheck", "--url="+bad.URL+"/healthz"); r.code != exitRuntime || !strings.Contains(r.errOut, "503") {
		t.Fatalf("unhealthy: %+v", r)
	}
	if healthURL(":9464") != "http://127.0.0.1:9464/healthz" || healthURL("10.1.2.3:80") != "http://10.1.2.3:80/healthz" {
		t.Fatal("healthURL")
	}
}

// dbArgs returns a fresh database migrated by the migrate command, and the flag pointing at it.
func migrated(t *testing.T) (*testenv.DB, string) {
	t.Helper()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	r := cli(t, "", false, "migrate", dsn)
	if r.code != 0 || !strings.Contains(r.out, "local_message: created") {
		t.Fatalf("migrate: %+v", r)
	}
	return db, dsn
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	r := cli(t, "", false, "migrate", dsn)
	if r.code != 0 || r.out != "local_message: up to date\n" {
		t.Fatalf("second migrate: %+v", r)
	}
	r = cli(t, "", false, "migrate", "--check", dsn, "--table=other_outbox")
	if r.code != exitRuntime || !strings.Contains(r.out, "other_outbox: missing table") {
		t.Fatalf("check on a missing table: %+v", r)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'other_outbox'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("--check created the table (%d, %v)", n, err)
	}
	r = cli(t, "", false, "migrate", dsn, "--tables=a_outbox,b_outbox")
	if r.code != 0 || r.out != "a_outbox: created\nb_outbox: created\n" {
		t.Fatalf("several tables: %+v", r)
	}
	if r := cli(t, "", false, "migrate", "--mysql-dsn=root:@tcp(127.0.0.1:1)/x"); r.code != exitRuntime {
		t.Fatalf("unreachable database: %+v", r)
	}
}

func insertRows(t *testing.T, db *testenv.DB, n int, topic string, status int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := db.Exec("INSERT INTO local_message (msg_id, topic, tag, content, status, fail_reason) VALUES (?, ?, '', 'x', ?, IF(? = 3, 'boom', NULL))",
			fmt.Sprintf("%s-%d-%d-%s", topic, status, i, testenv.RandomSuffix(6)), topic, status, status)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func countStatus(t *testing.T, db *testenv.DB, status int) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE status = ?", status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStatusAndDeadList(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	insertRows(t, db, 3, "orders", 0)
	insertRows(t, db, 2, "orders", 2)
	insertRows(t, db, 4, "stock", 3)

	r := cli(t, "", false, "status", "--json", dsn)
	if r.code != 0 {
		t.Fatalf("status: %+v", r)
	}
	var reports []ops.StatusReport
	if err := json.Unmarshal([]byte(r.out), &reports); err != nil {
		t.Fatalf("status --json: %v\n%s", err, r.out)
	}
	if len(reports) != 1 || reports[0].Pending != 3 || reports[0].Sent != 2 || reports[0].Dead != 4 || reports[0].Due != 3 {
		t.Fatalf("status = %+v", reports)
	}
	r = cli(t, "", false, "status", dsn)
	if r.code != 0 || !strings.Contains(r.out, "table local_message") || !regexp.MustCompile(`dead\s+4\n`).MatchString(r.out) {
		t.Fatalf("status table:\n%s", r.out)
	}

	r = cli(t, "", false, "dead", "list", dsn, "--topic=stock", "--limit=3", "--json")
	var dead []ops.DeadRow
	if err := json.Unmarshal([]byte(r.out), &dead); err != nil || r.code != 0 {
		t.Fatalf("dead list --json: %v %+v", err, r)
	}
	if len(dead) != 3 || dead[0].Table != "local_message" || dead[0].Topic != "stock" || dead[0].FailReason != "boom" {
		t.Fatalf("dead = %+v", dead)
	}
	r = cli(t, "", false, "dead", "list", dsn, "--topic=orders")
	if r.code != 0 || r.out != "no dead messages match\n" {
		t.Fatalf("dead list none: %+v", r)
	}
	r = cli(t, "", false, "dead", "list", dsn)
	if r.code != 0 || strings.Count(r.out, "\n") != 5 || !strings.Contains(r.out, "REASON") {
		t.Fatalf("dead list table:\n%s", r.out)
	}
}

func TestRequeueConfirmation(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	insertRows(t, db, 12, "stock", 3)
	insertRows(t, db, 2, "orders", 3)
	insertRows(t, db, 5, "orders", 2)

	// Over 10 rows, no terminal, no --yes: refused, nothing changed.
	r := cli(t, "", false, "requeue", dsn, "--all-dead")
	if r.code != exitRefused || !strings.Contains(r.errOut, "--yes") || countStatus(t, db, 3) != 14 {
		t.Fatalf("non-interactive: %+v", r)
	}
	// A person says no.
	r = cli(t, "n\n", true, "requeue", dsn, "--topic=stock")
	// The prompt names the server, the schema and the table (issue 23, row 10).
	if r.code != exitRefused || !strings.Contains(r.out, "Requeue 12 dead rows in local_message on "+config.DatabaseLabel(db.DSN)+"?") || countStatus(t, db, 3) != 14 {
		t.Fatalf("refused: %+v", r)
	}
	r = cli(t, "", false, "requeue", dsn, "--topic=stock", "--dry-run")
	if r.code != 0 || !strings.Contains(r.out, "would requeue 12") || countStatus(t, db, 3) != 14 {
		t.Fatalf("dry run: %+v", r)
	}
	// Up to 10 rows need no confirmation; exactly the selected topic changes.
	r = cli(t, "", false, "requeue", dsn, "--topic=orders")
	if r.code != 0 || !strings.Contains(r.out, "local_message: requeued 2 row(s)") || countStatus(t, db, 3) != 12 || countStatus(t, db, 2) != 5 {
		t.Fatalf("small requeue: %+v", r)
	}
	// A person says yes.
	r = cli(t, "y\n", true, "requeue", dsn, "--topic=stock")
	if r.code != 0 || !strings.Contains(r.out, "requeued 12 row(s)") || countStatus(t, db, 3) != 0 || countStatus(t, db, 0) != 14 {
		t.Fatalf("confirmed: %+v", r)
	}
	// --msg-id explains what it left alone.
	r = cli(t, "", false, "requeue", dsn, "--msg-id=nope", "--json")
	var res []ops.RequeueResult
	if err := json.Unmarshal([]byte(r.out), &res); err != nil || r.code != exitRuntime || res[0].Skipped["nope"] != "not found" {
		t.Fatalf("msg-id: %v %+v", err, r)
	}
	insertRows(t, db, 11, "late", 3)
	if r := cli(t, "", false, "requeue", dsn, "--all-dead", "--yes"); r.code != 0 || countStatus(t, db, 3) != 0 {
		t.Fatalf("--yes: %+v", r)
	}
}

func TestPurgeCommand(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	insertRows(t, db, 3, "orders", 2)
	insertRows(t, db, 1, "orders", 0)
	insertRows(t, db, 1, "orders", 3)
	if _, err := db.Exec("UPDATE local_message SET update_time = NOW() - INTERVAL 10 DAY"); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", false, "purge", dsn, "--older-than=168h", "--dry-run")
	if r.code != 0 || !strings.Contains(r.out, "would delete 3 sent row(s)") || countStatus(t, db, 2) != 3 {
		t.Fatalf("dry run: %+v", r)
	}
	r = cli(t, "", false, "purge", dsn, "--older-than=168h", "--delete-batch-size=2", "--json")
	var res []ops.PurgeResult
	if err := json.Unmarshal([]byte(r.out), &res); err != nil || r.code != 0 || res[0].Deleted != 3 || res[0].Batches != 2 {
		t.Fatalf("purge: %v %+v", err, r)
	}
	if countStatus(t, db, 2) != 0 || countStatus(t, db, 0) != 1 || countStatus(t, db, 3) != 1 {
		t.Fatal("purge touched unsent rows")
	}
	// relay.purge_retention is the default retention.
	if r := cli(t, "", false, "purge", dsn); r.code != exitUsage {
		t.Fatalf("no retention: %+v", r)
	}
	file := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(file, []byte("relay:\n  purge_retention: 1h\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, "", false, "purge", dsn, "--config="+file); r.code != 0 || !strings.Contains(r.out, "deleted 0 sent row(s)") {
		t.Fatalf("retention from config: %+v", r)
	}
}

// A command's own flag must not shadow a configuration flag: BindFlags would bind the
// configuration key to it.
func TestNoFlagShadowsAConfigFlag(t *testing.T) {
	t.Parallel()
	a := &app{}
	root := a.newRootCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if root.PersistentFlags().Lookup(f.Name) != nil {
				t.Errorf("%s: --%s shadows the configuration flag", c.CommandPath(), f.Name)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// TestPurgeRefusesAShortRetention is issue 23, row 9: `purge --older-than 1s` deleted sent
// rows at once, after which the same msg_id could be inserted and published again. Under
// the 1h floor purge refuses without --allow-short-retention, and deletes nothing.
func TestPurgeRefusesAShortRetention(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	if r := cli(t, "", false, "migrate", dsn); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content, status, update_time) VALUES ('sent-1', 't', '{}', 2, NOW() - INTERVAL 1 MINUTE)"); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", false, "purge", dsn, "--older-than=1s")
	if r.code != exitUsage || !strings.Contains(r.errOut, "--allow-short-retention") || !strings.Contains(r.errOut, "published again") {
		t.Fatalf("purge --older-than=1s: %+v", r)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows after the refused purge: %d, %v", n, err)
	}
	if r := cli(t, "", false, "purge", dsn, "--older-than=1s", "--allow-short-retention"); r.code != 0 || !strings.Contains(r.out, "deleted 1 sent row(s)") {
		t.Fatalf("purge --older-than=1s --allow-short-retention: %+v", r)
	}
}
