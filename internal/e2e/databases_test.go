// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// multiEnviron is the test's environment for a databases list written to a config file: no
// OUTBOX_MYSQL_DSN (the single form and the list do not mix), a lock key with {db}, and the
// extra variables (the databases' DSN secrets).
func (e *env) multiEnviron(t *testing.T, yaml string, extra ...string) []string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "outbox-relay.yaml")
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range e.environ() {
		if !strings.HasPrefix(kv, "OUTBOX_MYSQL_DSN=") {
			out = append(out, kv)
		}
	}
	out = append(out, "OUTBOX_CONFIG="+file, "OUTBOX_LOCK_KEY="+e.prefix+"lock:{db}:{table}")
	return append(out, extra...)
}

// startWith starts `outbox-relay run` with the environment environ.
func startWith(t *testing.T, environ []string) *proc {
	t.Helper()
	return &proc{testenv.StartProc(t, environ, binary, "run")}
}

// runCLI runs an operator command with environ; it returns the output and the exit code.
func runCLI(t *testing.T, environ []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = environ
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// httpGet returns the body and status of path on the relay's HTTP server ("" before it
// listens).
func httpGet(p *proc, path string) (string, int) {
	addr := p.httpAddr()
	if addr == "" {
		return "", 0
	}
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		return "", 0
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body), resp.StatusCode
}

// metricValue is the value of the series of /metrics text whose line starts with prefix.
func metricValue(metrics, prefix string) string {
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// commit writes msgs into table of db in one transaction, committed or rolled back.
func commit(t *testing.T, db *sql.DB, table string, msgs []outbox.Message, rollback bool) {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.InsertMany(context.Background(), tx, msgs); err != nil {
		t.Fatal(err)
	}
	if rollback {
		err = tx.Rollback()
	} else {
		err = tx.Commit()
	}
	if err != nil {
		t.Fatal(err)
	}
}

func messages(prefix, topic string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%04d", prefix, i), Topic: topic, Body: []byte(prefix)}
	}
	return msgs
}

func countWhere(t *testing.T, db *sql.DB, table, where string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + table + "` WHERE " + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// One process relays two databases (two schemas, distinct DSNs; both hold a local_message
// table): every committed row of both is delivered and marked sent, nothing of a rolled-back
// transaction is, each (database, table) has its own lock, the metrics have a series per
// database, and status lists both databases, or one with --database.
func TestTwoDatabasesInOneProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // shop-a: e.db, local_message migrated
	shopB := testenv.MySQL(t)
	ctx := context.Background()
	for _, table := range []string{"local_message", "outbox_payments"} {
		if err := schema.Migrate(ctx, shopB.DB, table); err != nil {
			t.Fatal(err)
		}
	}
	// Rows committed before the relay starts, and a transaction rolled back in each database.
	commit(t, e.db.DB, "local_message", messages("a-orders", "shop_a_orders", 300), false)
	commit(t, shopB.DB, "local_message", messages("b-orders", "shop_b_orders", 250), false)
	commit(t, shopB.DB, "outbox_payments", messages("b-pay", "shop_b_payments", 200), false)
	commit(t, e.db.DB, "local_message", messages("a-rolledback", "shop_a_orders", 5), true)
	commit(t, shopB.DB, "outbox_payments", messages("b-rolledback", "shop_b_payments", 5), true)

	// shop-a's DSN comes from the environment only; shop-b's from the file.
	yaml := fmt.Sprintf(`
databases:
  - name: shop-a
  - name: shop-b
    dsn: %q
    tables: [local_message, outbox_payments]
`, shopB.DSN)
	environ := e.multiEnviron(t, yaml, "OUTBOX_DATABASES_SHOP_A_DSN="+e.db.DSN)
	p := startWith(t, environ)

	// Rows committed while it runs, in both databases.
	commit(t, e.db.DB, "local_message", messages("a-live", "shop_a_orders", 100), false)
	commit(t, shopB.DB, "outbox_payments", messages("b-live", "shop_b_payments", 100), false)

	eventually(t, 60*time.Second, "every committed row of both databases marked sent", func() bool {
		return countWhere(t, e.db.DB, "local_message", "status = 2") == 400 &&
			countWhere(t, shopB.DB, "local_message", "status = 2") == 250 &&
			countWhere(t, shopB.DB, "outbox_payments", "status = 2") == 300
	})
	for topic, want := range map[string]int{"shop_a_orders": 400, "shop_b_orders": 250, "shop_b_payments": 300} {
		if n := e.broker.Count(topic); n != want {
			t.Errorf("broker has %d messages of %s, want %d", n, topic, want)
		}
	}
	for _, m := range append(e.broker.Messages("shop_a_orders"), e.broker.Messages("shop_b_payments")...) {
		if strings.Contains(string(m.Body), "rolledback") {
			t.Fatalf("a message of a rolled-back transaction was published: %s", m.Body)
		}
	}

	// Three locks, one per (database, table): the two local_message tables do not share one.
	labelA, labelB := config.DatabaseLabel(e.db.DSN), config.DatabaseLabel(shopB.DSN)
	keys := []string{e.prefix + "lock:" + labelA + ":local_message", e.prefix + "lock:" + labelB + ":local_message",
		e.prefix + "lock:" + labelB + ":outbox_payments"}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	defer rdb.Close()
	if n, err := rdb.Exists(ctx, keys...).Result(); err != nil || n != 3 {
		t.Fatalf("%d of the locks %v are held (%v)", n, keys, err)
	}

	// Metrics: a series per database, told apart by its label.
	metrics := metricsOf(p)
	for _, c := range []struct{ prefix, want string }{
		{`outbox_relay_leader{database="` + labelA + `",table="local_message"}`, "1"},
		{`outbox_relay_leader{database="` + labelB + `",table="local_message"}`, "1"},
		{`outbox_relay_leader{database="` + labelB + `",table="outbox_payments"}`, "1"},
		{`outbox_relay_published_total{database="` + labelA + `",table="local_message",tag="",topic="shop_a_orders"}`, "400"},
		{`outbox_relay_published_total{database="` + labelB + `",table="local_message",tag="",topic="shop_b_orders"}`, "250"},
		{`outbox_relay_published_total{database="` + labelB + `",table="outbox_payments",tag="",topic="shop_b_payments"}`, "300"},
	} {
		if got := metricValue(metrics, c.prefix); got != c.want {
			t.Errorf("%s = %q, want %s", c.prefix, got, c.want)
		}
	}
	ready, code := httpGet(p, "/readyz")
	if code != 200 || !strings.Contains(ready, "shop-a/local_message: leader") || !strings.Contains(ready, "shop-b/outbox_payments: leader") {
		t.Errorf("/readyz: %d\n%s", code, ready)
	}

	// status lists both databases' tables with their locks held by this relay; --database one
	// of them.
	out, exit := runCLI(t, environ, "status", "--json")
	var reports []ops.StatusReport
	if exit != 0 || json.Unmarshal([]byte(out), &reports) != nil {
		t.Fatalf("status --json: exit %d\n%s", exit, out)
	}
	got := map[string]int64{}
	for _, r := range reports {
		got[r.DatabaseName+"/"+r.Table] = r.Sent
		if r.Lock == nil || !r.Lock.Held || !strings.HasSuffix(r.Lock.Holder, fmt.Sprintf(" pid %d", p.Cmd.Process.Pid)) || r.Pending != 0 {
			t.Errorf("status of %s/%s: lock %+v, pending %d", r.DatabaseName, r.Table, r.Lock, r.Pending)
		}
	}
	if len(got) != 3 || got["shop-a/local_message"] != 400 || got["shop-b/local_message"] != 250 || got["shop-b/outbox_payments"] != 300 {
		t.Fatalf("status lists %v", got)
	}
	out, exit = runCLI(t, environ, "status", "--database", "shop-b")
	if exit != 0 || strings.Contains(out, "shop-a") || !strings.Contains(out, "table outbox_payments (database shop-b, "+labelB+")") {
		t.Fatalf("status --database shop-b: exit %d\n%s", exit, out)
	}
	out, exit = runCLI(t, environ, "status", "--database", "shop-c")
	if exit != 2 || !strings.Contains(out, "no such database (configured: shop-a, shop-b)") {
		t.Fatalf("status --database shop-c: exit %d\n%s", exit, out)
	}
	// The DSN secrets are never printed: config masks them.
	out, _ = runCLI(t, environ, "config")
	if mc, _ := mysql.ParseDSN(shopB.DSN); mc.Passwd != "" && strings.Contains(out, ":"+mc.Passwd+"@") {
		t.Fatalf("config shows a database's password:\n%s", out)
	}
	if !strings.Contains(out, "name: shop-a") || !strings.Contains(out, ":*****@tcp(") {
		t.Fatalf("config does not show the databases, masked:\n%s", out)
	}
}

// A database that does not answer at start (here: its schema does not exist yet) does not
// stop the others: they are relayed, /readyz answers 503 naming it, and once it exists and is
// migrated the same process relays it too.
func TestDatabaseDownAtStartIsRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	commit(t, e.db.DB, "local_message", messages("up", "shop_up", 50), false)

	// The late database: a schema name on the test server, created later.
	server, err := mysql.ParseDSN(testenv.MySQLServerDSN())
	if err != nil {
		t.Fatal(err)
	}
	server.DBName = ""
	admin, err := sql.Open("mysql", server.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	late := "outbox_t_late_" + strings.ToLower(testenv.RandomSuffix(8))
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + late) })
	lateCfg := *server
	lateCfg.DBName = late
	yaml := fmt.Sprintf("databases:\n  - name: up\n    dsn: %q\n  - name: late\n    dsn: %q\n", e.db.DSN, lateCfg.FormatDSN())
	p := startWith(t, e.multiEnviron(t, yaml))

	eventually(t, 30*time.Second, "the database that is up relayed", func() bool {
		return countWhere(t, e.db.DB, "local_message", "status = 2") == 50
	})
	ready, code := httpGet(p, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(ready, "mysql late: not relayed yet") ||
		!strings.Contains(ready, "late/local_message: waiting for its database") || !strings.Contains(ready, "up/local_message: leader") {
		t.Fatalf("/readyz while late is down: %d\n%s", code, ready)
	}
	if !strings.Contains(p.Out.String(), `"database_name":"late"`) {
		t.Fatalf("the relay did not log the database it cannot reach:\n%s", p.Out.String())
	}

	if _, err := admin.Exec("CREATE DATABASE " + late); err != nil {
		t.Fatal(err)
	}
	lateDB, err := sql.Open("mysql", lateCfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer lateDB.Close()
	if err := schema.Migrate(ctx, lateDB, "local_message"); err != nil {
		t.Fatal(err)
	}
	commit(t, lateDB, "local_message", messages("late", "shop_late", 40), false)
	eventually(t, 60*time.Second, "the late database relayed by the same process", func() bool {
		return countWhere(t, lateDB, "local_message", "status = 2") == 40
	})
	eventually(t, 10*time.Second, "/readyz ready", func() bool {
		body, code := httpGet(p, "/readyz")
		return code == 200 && strings.Contains(body, "late/local_message: leader")
	})
	if n := e.broker.Count("shop_late"); n != 40 {
		t.Fatalf("broker has %d messages of the late database, want 40", n)
	}
}
