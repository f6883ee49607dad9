// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// An outbox table without its stored-position journal (created by hand from the DDL, or by
// an earlier version) is relayed as it is: Check reports the journal missing, not fatal;
// Plan creates it with one online CREATE TABLE that touches nothing of the outbox table;
// after Apply the table is up to date and a second Plan has nothing to do.
func TestStoredLogCreatedByMigrate(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	ddl, _ := schema.DDL("local_message")
	for _, q := range []string{ddl, "INSERT INTO local_message (msg_id, topic, content) VALUES ('a', 'T', 'x'), ('b', 'T', 'y')"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := schema.HasStoredLog(ctx, db.DB, "local_message"); err != nil || ok {
		t.Fatalf("HasStoredLog = %v, %v before migrate; want false", ok, err)
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Kind != schema.MissingStoredLog || problems[0].Object != "local_message_stored" ||
		problems[0].Fatal() || !strings.Contains(problems[0].String(), "broker audit stays off") {
		t.Fatalf("Check = %v, want only the journal missing, not fatal", problems)
	}
	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || !steps[0].Online || !strings.HasPrefix(steps[0].SQL, "CREATE TABLE IF NOT EXISTS `local_message_stored`") {
		t.Fatalf("Plan = %+v, want the journal's online CREATE TABLE", steps)
	}
	if err := schema.Apply(ctx, db.DB, "local_message", steps, false); err != nil {
		t.Fatalf("Apply without blocking: %v", err)
	}
	if ok, err := schema.HasStoredLog(ctx, db.DB, "local_message"); err != nil || !ok {
		t.Fatalf("HasStoredLog = %v, %v after migrate; want true", ok, err)
	}
	assertUpToDate(t, db.DB, "local_message")
	if steps, err := schema.Plan(ctx, db.DB, "local_message"); err != nil || len(steps) != 0 {
		t.Fatalf("second Plan = %+v, %v; want nothing", steps, err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after migrate = %d, %v; want 2", n, err)
	}
}

// A missing outbox table gets its journal with it, and a table named after its journal
// needs a name that fits: a long table's journal name is shortened, still unique.
func TestStoredLogWithNewTable(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	long := strings.Repeat("t", 60)
	for _, table := range []string{"local_message", long} {
		steps, err := schema.Plan(ctx, db.DB, table)
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) != 2 || !strings.Contains(steps[1].SQL, schema.QuoteIdent(schema.StoredLogTable(table))) {
			t.Fatalf("Plan of a missing table %s = %+v; want it and its journal", table, steps)
		}
		if err := schema.Apply(ctx, db.DB, table, steps, false); err != nil {
			t.Fatal(err)
		}
		assertUpToDate(t, db.DB, table)
	}
	if name := schema.StoredLogTable(long); len(name) > 64 || !strings.HasSuffix(name, "_stored") {
		t.Fatalf("journal of a 60-character table: %q", name)
	}
}

// The broker audit's columns of pre-release builds (stored_broker ... stored_audit_time in
// the outbox table) are left alone: Check does not report them, Plan only adds the journal,
// and their values stay as they were (they may be dropped by hand).
func TestPreReleaseAuditColumnsLeftAlone(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	ddl, _ := schema.DDL("local_message")
	for _, q := range []string{ddl,
		"ALTER TABLE local_message ADD COLUMN `stored_broker` char(48) CHARACTER SET ascii NOT NULL DEFAULT '', " +
			"ADD COLUMN `stored_queue` int NOT NULL DEFAULT -1, ADD COLUMN `stored_offset` bigint NOT NULL DEFAULT -1, " +
			"ADD COLUMN `stored_commit_offset` bigint NOT NULL DEFAULT -1, ADD COLUMN `stored_audit_time` bigint NOT NULL DEFAULT 0",
		"INSERT INTO local_message (msg_id, topic, content, status, stored_broker, stored_queue, stored_offset) VALUES ('a', 'T', 'x', 2, 'broker-a', 3, 42)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil || len(steps) != 1 || !strings.Contains(steps[0].SQL, "local_message_stored") {
		t.Fatalf("Plan = %+v, %v; want only the journal", steps, err)
	}
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	assertUpToDate(t, db.DB, "local_message")
	var got string
	if err := db.QueryRow("SELECT CONCAT_WS(' ', stored_broker, stored_queue, stored_offset) FROM local_message").Scan(&got); err != nil || got != "broker-a 3 42" {
		t.Fatalf("old columns after migrate: %q, %v", got, err)
	}
}

// A table of the journal's name that is not a journal is reported, and Plan refuses to
// touch it rather than leave the audit reading a table it does not understand.
func TestForeignTableAtJournalName(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	ddl, _ := schema.DDL("local_message")
	for _, q := range []string{ddl, "CREATE TABLE local_message_stored (seq bigint PRIMARY KEY, note varchar(10))"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil || len(problems) != 1 || problems[0].Kind != schema.MissingStoredLog || problems[0].Fatal() ||
		!strings.Contains(problems[0].Got, "settled_time") {
		t.Fatalf("Check = %v, %v; want the journal reported, naming what it lacks", problems, err)
	}
	if ok, err := schema.HasStoredLog(ctx, db.DB, "local_message"); err != nil || ok {
		t.Fatalf("HasStoredLog = %v, %v; want false", ok, err)
	}
	if _, err := schema.Plan(ctx, db.DB, "local_message"); err == nil || !strings.Contains(err.Error(), "local_message_stored") {
		t.Fatalf("Plan = %v; want an error naming the journal", err)
	}
}

// A journal whose columns an account cannot see (a database-wide CREATE shows it the table,
// not its columns) is reported, not fatal, and never stops a check of the outbox table: the
// relay runs on it without the audit.
func TestHiddenJournalNotFatal(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	dsn := db.Account(t, "GRANT CREATE ON {db}.* TO {user}", "GRANT SELECT, UPDATE, DELETE ON {db}.local_message TO {user}")
	other, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	problems, err := schema.Check(ctx, other, "local_message")
	if err != nil || len(problems) != 1 || problems[0].Kind != schema.MissingStoredLog || problems[0].Fatal() ||
		!strings.Contains(problems[0].Got, "hidden") {
		t.Fatalf("Check by an account that cannot see the journal's columns = %v, %v; want one non-fatal problem saying so", problems, err)
	}
}
