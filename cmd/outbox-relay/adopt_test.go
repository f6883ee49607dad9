// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// readmeGrants returns the GRANT statements of README.md's mysql-grants block, with the
// schema written {db} and each account {user}, keyed by the account's name in the README.
func readmeGrants(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "<!-- mysql-grants -->\n```sql\n")
	if i < 0 {
		t.Fatal("README.md has no mysql-grants block")
	}
	block := doc[i+len("<!-- mysql-grants -->\n```sql\n"):]
	block = block[:strings.Index(block, "```")]
	grant := regexp.MustCompile(`^GRANT (.+) ON shop\.(\S+) TO '(\w+)'@'%';$`)
	out := map[string][]string{}
	for _, line := range strings.Split(block, "\n") {
		if m := grant.FindStringSubmatch(line); m != nil {
			out[m[3]] = append(out[m[3]], "GRANT "+m[1]+" ON {db}."+m[2]+" TO {user}")
		}
	}
	if out["outbox_migrate"] == nil || out["outbox_relay"] == nil {
		t.Fatalf("README.md's mysql-grants block lacks outbox_migrate or outbox_relay:\n%s", block)
	}
	return out
}

// Row 2 of issue 26: with the grants the README used to give (CREATE, ALTER, INDEX),
// information_schema hid the table's columns and migrate printed "created", exit 0, having
// changed nothing. migrate must say it cannot see the table; the documented grants must work.
func TestMigrateWithTheDocumentedGrants(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	seed002(t, db)
	givenUpRows(t, db)

	old := db.Account(t, "GRANT CREATE, ALTER, INDEX ON {db}.* TO {user}")
	r := cli(t, "", false, "migrate", "--mysql-dsn="+old, "--allow-blocking")
	if r.code != exitRuntime || strings.Contains(r.out, "created") || !strings.Contains(r.errOut, "grant SELECT") {
		t.Fatalf("migrate by an account that cannot see the table: %+v", r)
	}
	if r := cli(t, "", false, "migrate", "--mysql-dsn="+old, "--check"); r.code != exitRuntime || !strings.Contains(r.errOut, "columns are hidden") {
		t.Fatalf("migrate --check by an account that cannot see the table: %+v", r)
	}

	grants := readmeGrants(t)
	migrator := db.Account(t, grants["outbox_migrate"]...)
	r = cli(t, "", false, "migrate", "--mysql-dsn="+migrator, "--allow-blocking")
	if r.code != 0 || !strings.Contains(r.out, "local_message: upgraded") || !strings.Contains(r.out, "parked dead") {
		t.Fatalf("migrate with the README's grants: %+v", r)
	}
	relay := db.Account(t, grants["outbox_relay"]...)
	if r := cli(t, "", false, "migrate", "--mysql-dsn="+relay, "--check"); r.code != 0 || r.out != "local_message: up to date\n" {
		t.Fatalf("the relay's account finds the table not ready: %+v", r)
	}
	if r := cli(t, "", false, "status", "--mysql-dsn="+relay, "--redis-addr=127.0.0.1:1"); r.code != 0 {
		t.Fatalf("status with the relay's grants: %+v", r)
	}
	if r := cli(t, "", false, "requeue", "--mysql-dsn="+relay, "--msg-id=gave-up-1", "--yes"); r.code != 0 {
		t.Fatalf("requeue with the relay's grants: %+v", r)
	}
}

// givenUpRows adds to a seed-002 table what a seed-002 relay leaves behind after 90 days:
// rows it gave up on (status 1, retry_count past max_retry_count), a row still being retried
// and a pending row.
func givenUpRows(t *testing.T, db *testenv.DB) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO local_message (id, msg_id, topic, content, status, retry_count, max_retry_count, create_time) VALUES
		(11, 'gave-up-1', 'venue', '{}', 1, 4, 3, NOW() - INTERVAL 90 DAY),
		(12, 'gave-up-2', 'venue', '{}', 1, 6, 5, NOW() - INTERVAL 80 DAY),
		(13, 'retrying', 'venue', '{}', 1, 2, 3, NOW()),
		(14, 'at-the-limit', 'venue', '{}', 1, 3, 3, NOW())`); err != nil {
		t.Fatal(err)
	}
}

// Row 3 of issue 26: rows a seed-002 relay had given up on were published within 100 ms of
// the relay's first start. migrate lists them and parks them dead; --check and --print-sql
// show them first.
func TestMigrateParksRowsThePreviousRelayGaveUpOn(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	seed002(t, db)
	givenUpRows(t, db)
	statuses := func() string {
		var s string
		if err := db.QueryRow("SELECT GROUP_CONCAT(msg_id, '=', status ORDER BY id) FROM local_message").Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const untouched = "gave-up-1=1,gave-up-2=1,retrying=1,at-the-limit=1,a=0"
	r := cli(t, "", false, "migrate", dsn, "--check")
	if r.code != exitRuntime || !strings.Contains(r.out, "local_message: 2 row(s) the previous relay gave up on") ||
		!strings.Contains(r.out, "msg_id gave-up-1") || !strings.Contains(r.out, "msg_id gave-up-2") || strings.Contains(r.out, "retrying") {
		t.Fatalf("migrate --check: %+v", r)
	}
	r = cli(t, "", false, "migrate", dsn, "--print-sql")
	if r.code != 0 || !strings.Contains(r.out, "SET status = 3") || statuses() != untouched {
		t.Fatalf("migrate --print-sql: %+v (%s)", r, statuses())
	}
	r = cli(t, "", false, "migrate", dsn, "--allow-blocking")
	if r.code != 0 || !strings.Contains(r.out, "2 row(s) the previous relay gave up on") || !strings.Contains(r.out, "parked dead") {
		t.Fatalf("migrate: %+v", r)
	}
	if got := statuses(); got != "gave-up-1=3,gave-up-2=3,retrying=1,at-the-limit=1,a=0" {
		t.Fatalf("after migrate: %s", got)
	}
	r = cli(t, "", false, "dead", "list", dsn)
	if r.code != 0 || !strings.Contains(r.out, "gave-up-1") || !strings.Contains(r.out, "given up by the previous relay") {
		t.Fatalf("dead list after migrate: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, "--check"); r.code != 0 {
		t.Fatalf("migrate --check after migrate: %+v", r)
	}
}

// Row 11 of issue 26: migrate --dedupe-table in the consumer's database also created an
// outbox table there. It creates only what it is asked to.
func TestMigrateDedupeTableTouchesNothingElse(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	r := cli(t, "", false, "migrate", dsn, "--dedupe-table=stock_dedupe")
	if r.code != 0 || r.out != "stock_dedupe: dedupe table created\n" {
		t.Fatalf("migrate --dedupe-table: %+v", r)
	}
	var tables string
	if err := db.QueryRow("SELECT GROUP_CONCAT(table_name) FROM information_schema.tables WHERE table_schema = DATABASE()").Scan(&tables); err != nil || tables != "stock_dedupe" {
		t.Fatalf("tables after migrate --dedupe-table: %q, %v", tables, err)
	}
	// Naming the outbox table as well migrates both.
	r = cli(t, "", false, "migrate", dsn, "--dedupe-table=stock_dedupe", "--table=local_message")
	if r.code != 0 || r.out != "local_message: created\nstock_dedupe: dedupe table exists\n" {
		t.Fatalf("migrate --dedupe-table --table: %+v", r)
	}
}

// Row 10 of issue 26: on a live seed-002 table migrate stops at the blocking id step; it
// says which steps it ran and which it did not, and the MODIFY keeps the column's comment.
func TestMigrateReportsItsStepsAndKeepsComments(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	seed002(t, db)
	r := cli(t, "", false, "migrate", dsn)
	if r.code != exitRuntime || !strings.Contains(r.out, "local_message: ran step 1 of 3 (online): ADD COLUMN `msg_keys`") ||
		!strings.Contains(r.out, "local_message: stopped before step 3 of 3 (BLOCKING, not run): MODIFY COLUMN `id`") ||
		!strings.Contains(r.errOut, "ran 2 of 3 step(s)") {
		t.Fatalf("migrate of a live seed-002 table: %+v", r)
	}
	r = cli(t, "", false, "migrate", dsn, "--allow-blocking")
	if r.code != 0 || !strings.Contains(r.out, "local_message: ran step 1 of 1 (BLOCKING): MODIFY COLUMN `id` bigint NOT NULL AUTO_INCREMENT COMMENT '主键ID'") {
		t.Fatalf("migrate --allow-blocking: %+v", r)
	}
	if ddl := createTable(t, db, "local_message"); !strings.Contains(ddl, "`id` bigint(20) NOT NULL AUTO_INCREMENT COMMENT '主键ID'") {
		t.Fatalf("id lost its comment or AUTO_INCREMENT:\n%s", ddl)
	}
	// The quick start warns of that exit 1 where it shows migrate.
	b, _ := os.ReadFile("../../README.md")
	quick := string(b)[strings.Index(string(b), "## Quick start"):]
	quick = quick[:strings.Index(quick, "### In Go")]
	if !strings.Contains(quick, "exit 1") || !strings.Contains(quick, "--allow-blocking") {
		t.Errorf("README's quick start does not say that migrate exits 1 at the blocking step:\n%s", quick)
	}
}
