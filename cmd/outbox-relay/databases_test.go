// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// twoDatabases writes a config file listing shop-a and shop-b (fresh databases, migrated by
// the migrate command) and returns them with the --config flag.
func twoDatabases(t *testing.T, extra string) (a, b *testenv.DB, flag string) {
	t.Helper()
	a, b = testenv.MySQL(t), testenv.MySQL(t)
	file := filepath.Join(t.TempDir(), "relay.yaml")
	yaml := fmt.Sprintf("databases:\n  - name: shop-a\n    dsn: %q\n  - name: shop-b\n    dsn: %q\n%s", a.DSN, b.DSN, extra)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	flag = "--config=" + file
	if extra == "" {
		r := cli(t, "", false, "migrate", flag)
		if r.code != 0 || r.out != "shop-a/local_message: created\nshop-b/local_message: created\n" {
			t.Fatalf("migrate of both databases: %+v", r)
		}
		return a, b, flag
	}
	for _, name := range []string{"shop-a", "shop-b"} {
		if r := cli(t, "", false, "migrate", flag, "--database="+name); r.code != 0 || r.out != name+"/local_message: created\n" {
			t.Fatalf("migrate --database %s: %+v", name, r)
		}
	}
	return a, b, flag
}

func insertDead(t *testing.T, db *testenv.DB, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content, status, fail_reason) VALUES (?, 'orders', 'x', 3, 'boom')",
			fmt.Sprintf("%s-%d", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// dead list pages database by database with a DATABASE/TABLE:ID cursor, and a page that
// ends exactly at the end of a database still says that the next database has more.
func TestDeadListPagesOverDatabases(t *testing.T) {
	t.Parallel()
	a, b, cfg := twoDatabases(t, "")
	insertDead(t, a, "a", 3)
	insertDead(t, b, "b", 4)
	rowRE := regexp.MustCompile(`(?m)^(shop-[ab])/local_message\s+\d+\s+([ab]-\d)\s`)
	moreRE := regexp.MustCompile(`more: next page with --after (\S+)`)
	var seen []string
	after := ""
	for page := 1; ; page++ {
		args := []string{"dead", "list", cfg, "--limit=3"}
		if after != "" {
			args = append(args, "--after="+after)
		}
		r := cli(t, "", false, args...)
		if r.code != 0 || page > 3 {
			t.Fatalf("page %d: %+v", page, r)
		}
		for _, m := range rowRE.FindAllStringSubmatch(r.out, -1) {
			if m[1] != "shop-"+m[2][:1] {
				t.Fatalf("row %s listed under %s", m[2], m[1])
			}
			seen = append(seen, m[2])
		}
		m := moreRE.FindStringSubmatch(r.out)
		if m == nil {
			break
		}
		after = m[1]
		if page == 1 && after != "shop-a/local_message:3" {
			t.Fatalf("page 1 cursor %q:\n%s", after, r.out)
		}
	}
	if strings.Join(seen, ",") != "a-0,a-1,a-2,b-0,b-1,b-2,b-3" {
		t.Fatalf("pages listed %v", seen)
	}
	if r := cli(t, "", false, "dead", "list", cfg, "--database=shop-b", "--json"); r.code != 0 || strings.Count(r.out, `"database_name": "shop-b"`) != 4 || strings.Contains(r.out, "shop-a") {
		t.Fatalf("dead list --database shop-b: %+v", r)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"dead", "list", cfg, "--after=local_message:1"}},        // no database in the cursor
		{[]string{"dead", "list", cfg, "--after=shop-c/local_message:1"}}, // an unknown database
		{[]string{"dead", "list", cfg, "--after-id=1"}},                   // two tables in all
		{[]string{"dead", "list", cfg, "--database=shop-c"}},
	} {
		if r := cli(t, "", false, c.args...); r.code != exitUsage {
			t.Errorf("%v: %+v", c.args, r)
		}
	}
}

// requeue, purge and migrate act on every database, or on the one --database names.
func TestOperatorCommandsActOnTheNamedDatabase(t *testing.T) {
	t.Parallel()
	a, b, cfg := twoDatabases(t, "")
	insertDead(t, a, "a", 2)
	insertDead(t, b, "b", 2)
	r := cli(t, "", false, "requeue", cfg, "--database=shop-b", "--all-dead", "--yes")
	if r.code != 0 || !strings.Contains(r.out, "shop-b/local_message: requeued 2 row(s)") || strings.Contains(r.out, "shop-a") {
		t.Fatalf("requeue --database shop-b: %+v", r)
	}
	if countStatus(t, a, 3) != 2 || countStatus(t, b, 3) != 0 || countStatus(t, b, 0) != 2 {
		t.Fatal("requeue --database shop-b changed shop-a, or not shop-b")
	}
	// A msg-id is found in whichever database holds it; one no database holds is named.
	r = cli(t, "", false, "requeue", cfg, "--msg-id=a-1", "--msg-id=zz-9")
	if r.code != exitRuntime || !strings.Contains(r.out, "shop-a/local_message: requeued 1 row(s)") ||
		!strings.Contains(r.errOut, "zz-9: not found in shop-a/local_message, shop-b/local_message") {
		t.Fatalf("requeue by msg-id over both databases: %+v", r)
	}
	if countStatus(t, a, 3) != 1 {
		t.Fatal("a-1 was not requeued")
	}
	r = cli(t, "", false, "purge", cfg, "--older-than=1h", "--dry-run")
	if r.code != 0 || !strings.Contains(r.out, "shop-a/local_message: would delete 0") || !strings.Contains(r.out, "shop-b/local_message: would delete 0") {
		t.Fatalf("purge over both databases: %+v", r)
	}
	if r := cli(t, "", false, "migrate", cfg, "--check", "--database=shop-a"); r.code != 0 || r.out != "shop-a/local_message: up to date\n" {
		t.Fatalf("migrate --check --database shop-a: %+v", r)
	}
	if r := cli(t, "", false, "migrate", cfg, "--dedupe-table=consumed"); r.code != exitUsage || !strings.Contains(r.errOut, "--database") {
		t.Fatalf("migrate --dedupe-table over two databases: %+v", r)
	}
	if r := cli(t, "", false, "bench", cfg); r.code != exitUsage || !strings.Contains(r.errOut, "--database") {
		t.Fatalf("bench over two databases: %+v", r)
	}
	if r := cli(t, "", false, "requeue", cfg, "--all-dead", "--database=nope"); r.code != exitUsage ||
		!strings.Contains(r.errOut, "--database nope: no such database (configured: shop-a, shop-b)") {
		t.Fatalf("unknown --database: %+v", r)
	}
}

// status shows every database's tables; one it cannot reach is reported after the others,
// and the command exits 1.
func TestStatusOverDatabasesWithOneDown(t *testing.T) {
	t.Parallel()
	_, b, cfg := twoDatabases(t, "  - name: shop-down\n    dsn: \"u:secret-pw@tcp(127.0.0.1:1)/gone\"\n")
	insertDead(t, b, "b", 1)
	r := cli(t, "", false, "status", cfg, "--redis-addr="+testenv.RedisAddr(), "--database=shop-b")
	if r.code != 0 || !strings.Contains(r.out, "table local_message (database shop-b, ") || strings.Contains(r.out, "shop-a") {
		t.Fatalf("status --database shop-b: %+v", r)
	}
	r = cli(t, "", false, "status", cfg, "--redis-addr="+testenv.RedisAddr())
	if r.code != exitRuntime || !strings.Contains(r.out, "(database shop-a, ") || !strings.Contains(r.out, "(database shop-b, ") ||
		!strings.Contains(r.errOut, "database shop-down (127.0.0.1:1/gone)") || strings.Contains(r.errOut+r.out, "secret-pw") {
		t.Fatalf("status with a database down: %+v", r)
	}
}
