// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// seedTable creates table with seed 002's DDL and one row with an application-chosen id.
func seedTable(t *testing.T, db *testenv.DB, table string) {
	t.Helper()
	ddl, err := os.ReadFile("testdata/classicrelay.sql")
	if err != nil {
		t.Fatal(err)
	}
	stmt := strings.Replace(string(ddl), "`local_message`", schema.QuoteIdent(table), 1)
	if _, err := db.Exec(stmt); err != nil {
		t.Fatalf("seed DDL: %v", err)
	}
	if _, err := db.Exec("INSERT INTO " + schema.QuoteIdent(table) + " (id, msg_id, topic, content) VALUES (1869000000000000001, 'a', 'venue', '{}')"); err != nil {
		t.Fatal(err)
	}
}

// Upgrading a live table: the columns and indexes are added by one online ALTER (the server
// refuses LOCK=NONE rather than block writes, so running it proves it was online); making id
// AUTO_INCREMENT copies the table, so it is a separate step, marked blocking, that Apply
// runs on a table with rows only when allowed.
func TestPlanSeparatesOnlineAndBlockingSteps(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	seedTable(t, db, "local_message")

	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || !steps[1].Online || !strings.Contains(steps[1].SQL, "CREATE TABLE IF NOT EXISTS `local_message_stored`") {
		t.Fatalf("Plan = %+v, want an online step, the journal's CREATE TABLE and a blocking step", steps)
	}
	on, off := steps[0], steps[2]
	if !on.Online || !strings.HasSuffix(on.SQL, "ALGORITHM=INPLACE, LOCK=NONE") || !strings.Contains(on.Alter, "ADD COLUMN `sent_time`") ||
		strings.Contains(on.Alter, "ALGORITHM") || strings.Contains(on.SQL, "AUTO_INCREMENT") {
		t.Errorf("online step = %+v", on)
	}
	if off.Online || !strings.Contains(off.SQL, "AUTO_INCREMENT") || !strings.Contains(off.SQL, "MODIFY COLUMN `content` mediumtext NOT NULL COMMENT '消息内容(JSON格式)'") ||
		!strings.Contains(off.SQL, "COMMENT '主键ID'") || !strings.Contains(off.Blocking, "copying the table") {
		t.Errorf("blocking step = %+v", off)
	}

	// Not allowed to block: the online step runs, the blocking one is refused.
	err = schema.Apply(ctx, db.DB, "local_message", steps, false)
	if !errors.Is(err, schema.ErrNotOnline) || !strings.Contains(err.Error(), "AUTO_INCREMENT") {
		t.Fatalf("Apply without blocking = %v, want ErrNotOnline", err)
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil || len(problems) != 2 || problems[0].Kind != "not auto_increment" || problems[1].Kind != "narrow column" {
		t.Fatalf("after the online step: %v %v, want only id and content left", problems, err)
	}
	steps, _ = schema.Plan(ctx, db.DB, "local_message")
	if err := schema.Apply(ctx, db.DB, "local_message", steps, true); err != nil {
		t.Fatalf("Apply with blocking allowed: %v", err)
	}
	assertUpToDate(t, db.DB, "local_message")
	if steps, err := schema.Plan(ctx, db.DB, "local_message"); err != nil || len(steps) != 0 {
		t.Fatalf("Plan on an up-to-date table = %v, %v", steps, err)
	}

	// A blocking step on an empty table blocks nobody: it runs.
	empty := testenv.MySQL(t)
	seedTable(t, empty, "local_message")
	if _, err := empty.Exec("DELETE FROM local_message"); err != nil {
		t.Fatal(err)
	}
	steps, _ = schema.Plan(ctx, empty.DB, "local_message")
	if err := schema.Apply(ctx, empty.DB, "local_message", steps, false); err != nil {
		t.Fatalf("Apply on an empty table: %v", err)
	}
	assertUpToDate(t, empty.DB, "local_message")
}

// Reserved words are valid table names: every statement quotes them.
func TestReservedWordTableNames(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	for _, table := range []string{"order", "group"} {
		if err := schema.Migrate(ctx, db.DB, table); err != nil {
			t.Fatalf("Migrate %s: %v", table, err)
		}
		assertUpToDate(t, db.DB, table)
	}
	seedTable(t, db, "select")
	if err := schema.Migrate(ctx, db.DB, "select"); err != nil {
		t.Fatalf("upgrade of a table named select: %v", err)
	}
	assertUpToDate(t, db.DB, "select")
	steps, err := schema.DedupePlan(ctx, db.DB, "key")
	if err != nil || len(steps) != 1 {
		t.Fatalf("DedupePlan(key) = %v, %v", steps, err)
	}
	if err := schema.Apply(ctx, db.DB, "key", steps, false); err != nil {
		t.Fatalf("create dedupe table key: %v", err)
	}
	if steps, err := schema.DedupePlan(ctx, db.DB, "key"); err != nil || len(steps) != 0 {
		t.Fatalf("DedupePlan on an existing table = %v, %v", steps, err)
	}
	// A dedupe table of an earlier version gets its fingerprint column online.
	if _, err := db.Exec("ALTER TABLE `key` DROP COLUMN fingerprint"); err != nil {
		t.Fatal(err)
	}
	steps, err = schema.DedupePlan(ctx, db.DB, "key")
	if err != nil || len(steps) != 1 || !steps[0].Online || !strings.Contains(steps[0].SQL, "ADD COLUMN `fingerprint`") {
		t.Fatalf("DedupePlan on a table without fingerprint = %+v, %v", steps, err)
	}
	if err := schema.Apply(ctx, db.DB, "key", steps, false); err != nil {
		t.Fatalf("add the fingerprint column: %v", err)
	}
	if got := schema.QuoteIdent("order"); got != "`order`" {
		t.Fatalf("QuoteIdent = %s", got)
	}
}
