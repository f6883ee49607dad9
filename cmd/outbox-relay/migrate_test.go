// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// seed002 creates a live classic local-message table (application-chosen ids) with one row.
func seed002(t *testing.T, db *testenv.DB) {
	t.Helper()
	ddl, err := os.ReadFile("../../schema/testdata/classicrelay.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO local_message (id, msg_id, topic, content) VALUES (1869000000000000001, 'a', 'venue', '{}')"); err != nil {
		t.Fatal(err)
	}
}

func createTable(t *testing.T, db *testenv.DB, table string) string {
	t.Helper()
	var name, ddl string
	if err := db.QueryRow("SHOW CREATE TABLE "+table).Scan(&name, &ddl); err != nil {
		t.Fatal(err)
	}
	return ddl
}

// migrate --print-sql prints the DDL for a migration tool and runs nothing; what it prints
// brings the table up to date.
func TestMigratePrintSQL(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	seed002(t, db)
	before := createTable(t, db, "local_message")

	r := cli(t, "", false, "migrate", dsn, "--print-sql", "--tables=local_message,fresh_outbox", "--dedupe-table=stock_dedupe")
	if r.code != 0 {
		t.Fatalf("--print-sql: %+v", r)
	}
	for _, want := range []string{
		"-- local_message: online (the application keeps writing)",
		"ALGORITHM=INPLACE, LOCK=NONE;",
		"-- gh-ost / pt-online-schema-change --alter: ADD COLUMN `msg_keys`",
		"-- local_message: BLOCKING: making id AUTO_INCREMENT",
		"ALTER TABLE `local_message` MODIFY COLUMN `id` bigint NOT NULL AUTO_INCREMENT COMMENT '主键ID', " +
			"MODIFY COLUMN `content` mediumtext NOT NULL COMMENT '消息内容(JSON格式)', ALGORITHM=COPY, LOCK=SHARED;",
		"CREATE TABLE IF NOT EXISTS `fresh_outbox`",
		"CREATE TABLE IF NOT EXISTS `stock_dedupe`",
	} {
		if !strings.Contains(r.out, want) {
			t.Errorf("--print-sql lacks %q:\n%s", want, r.out)
		}
	}
	if createTable(t, db, "local_message") != before {
		t.Fatal("--print-sql changed the table")
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name IN ('fresh_outbox', 'stock_dedupe')").Scan(&n); err != nil || n != 0 {
		t.Fatalf("--print-sql created tables (%d, %v)", n, err)
	}
	// What a DBA would run: the printed statements, as printed.
	for _, stmt := range strings.Split(r.out, ";\n") {
		if s := strings.TrimSpace(stmt); s != "" && !strings.HasPrefix(lastSQLLine(s), "--") {
			if _, err := db.Exec(s); err != nil {
				t.Fatalf("printed statement fails: %v\n%s", err, s)
			}
		}
	}
	r = cli(t, "", false, "migrate", dsn, "--check", "--tables=local_message,fresh_outbox", "--dedupe-table=stock_dedupe")
	if r.code != 0 {
		t.Fatalf("after running the printed SQL, --check: %+v", r)
	}
}

func lastSQLLine(s string) string {
	lines := strings.Split(s, "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// migrate on a live seed table runs the online step and stops before the blocking one unless
// --allow-blocking; --dedupe-table with --table creates the consumer's dedupe table as well.
func TestMigrateLiveTableNeedsAllowBlocking(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	seed002(t, db)
	r := cli(t, "", false, "migrate", dsn, "--dedupe-table=stock_dedupe", "--table=local_message")
	if r.code != exitRuntime || !strings.Contains(r.errOut, "--allow-blocking") || !strings.Contains(r.errOut, "AUTO_INCREMENT") {
		t.Fatalf("migrate of a live seed table: %+v", r)
	}
	if ddl := createTable(t, db, "local_message"); !strings.Contains(ddl, "`sent_time`") || strings.Contains(ddl, "AUTO_INCREMENT") {
		t.Fatalf("online step not applied, or blocking step applied:\n%s", ddl)
	}
	r = cli(t, "", false, "migrate", dsn, "--allow-blocking", "--dedupe-table=stock_dedupe", "--table=local_message")
	if r.code != 0 || !strings.Contains(r.out, "local_message: upgraded") || !strings.Contains(r.out, "stock_dedupe: dedupe table created") {
		t.Fatalf("migrate --allow-blocking: %+v", r)
	}
	r = cli(t, "", false, "migrate", dsn, "--dedupe-table=stock_dedupe", "--table=local_message")
	if r.code != 0 || r.out != "local_message: up to date\nstock_dedupe: dedupe table exists\n" {
		t.Fatalf("second migrate: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, "--table=order"); r.code != 0 || r.out != "order: created\n" {
		t.Fatalf("migrate --table=order: %+v", r)
	}
	if r := cli(t, "", false, "status", dsn, "--table=order", "--redis-addr=127.0.0.1:1"); r.code != 0 || !strings.Contains(r.out, "table order (") {
		t.Fatalf("status --table=order: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, "--dedupe-table=bad-name"); r.code != exitUsage {
		t.Fatalf("bad dedupe table name: %+v", r)
	}
}

// migrate with relay.partitions adds the partition column; a relay or a check configured
// for another number of partitions finds the table not ready, naming what differs.
func TestMigratePartitions(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	conf := func(p int) string {
		f := filepath.Join(t.TempDir(), "relay.yaml")
		if err := os.WriteFile(f, []byte(fmt.Sprintf("relay:\n  partitions: %d\n", p)), 0o600); err != nil {
			t.Fatal(err)
		}
		return "--config=" + f
	}
	if r := cli(t, "", false, "migrate", dsn, conf(8)); r.code != 0 || !strings.Contains(r.out, "local_message: created") {
		t.Fatalf("migrate with 8 partitions: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, conf(8), "--check"); r.code != 0 || !strings.Contains(r.out, "up to date") {
		t.Fatalf("migrate --check with 8 partitions: %+v", r)
	}
	r := cli(t, "", false, "migrate", dsn, conf(4), "--check")
	if r.code != 1 || !strings.Contains(r.out, "wrong partitions relay_partition (want 4 partitions (relay.partitions), got 8 partitions)") {
		t.Fatalf("migrate --check with 4 partitions on a table of 8: %+v", r)
	}
	if r := cli(t, "", false, "run", dsn, conf(4)); r.code != 1 || !strings.Contains(r.errOut, "wrong partitions") {
		t.Fatalf("run with 4 partitions on a table of 8: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, conf(4)); r.code != 0 || !strings.Contains(r.out, "upgraded") {
		t.Fatalf("migrate to 4 partitions: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, conf(4), "--check"); r.code != 0 {
		t.Fatalf("migrate --check after going to 4 partitions: %+v", r)
	}
}

// TestMigrateCheckNarrowContent is issue 26, row 13: an adopted table whose content is text
// (64 KiB) is not up to date for `migrate --check`, which names the limit; `migrate` widens
// it (a copy of the table, so --allow-blocking on a table with rows), and a 70 KB body fits.
func TestMigrateCheckNarrowContent(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	if r := cli(t, "", false, "migrate", dsn); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	if _, err := db.Exec("ALTER TABLE local_message MODIFY content text NOT NULL"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES ('a', 't', '{}')"); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", false, "migrate", dsn, "--check")
	if r.code != 1 || !strings.Contains(r.out, "narrow column content") || !strings.Contains(r.out, "65535 bytes") {
		t.Fatalf("migrate --check on content text: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn); r.code == 0 || !strings.Contains(r.out+r.errOut, "--allow-blocking") {
		t.Fatalf("migrate without --allow-blocking on a table with rows: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, "--allow-blocking"); r.code != 0 {
		t.Fatalf("migrate --allow-blocking: %+v", r)
	}
	if r := cli(t, "", false, "migrate", dsn, "--check"); r.code != 0 {
		t.Fatalf("migrate --check after widening: %+v", r)
	}
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES ('big', 't', ?)", strings.Repeat("x", 70_000)); err != nil {
		t.Fatalf("a 70 KB body after migrate: %v", err)
	}
}
