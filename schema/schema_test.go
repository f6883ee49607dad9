// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

func TestMigrateEmptyDatabase(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()

	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Kind != "missing table" {
		t.Fatalf("Check before migrate = %v, want one missing table", problems)
	}
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	assertUpToDate(t, db.DB, "local_message")

	// The minimal insert works and fills every default the relay relies on.
	if _, err := db.Exec(schema.InsertSQL, "m1", "orders", "created", `{"orderSn":"1"}`, "1"); err != nil {
		t.Fatalf("minimal insert: %v", err)
	}
	var status, retries, maxRetries int
	var next, sent int64
	var keys, shard string
	err = db.QueryRow(`SELECT status, retry_count, max_retry_count, next_retry_time, sent_time, msg_keys, sharding_key
		FROM local_message WHERE msg_id = 'm1'`).Scan(&status, &retries, &maxRetries, &next, &sent, &keys, &shard)
	if err != nil {
		t.Fatal(err)
	}
	if status != 0 || retries != 0 || maxRetries != 3 || next != 0 || sent != 0 || keys != "1" || shard != "" {
		t.Fatalf("defaults: status=%d retries=%d max=%d next=%d sent=%d keys=%q shard=%q", status, retries, maxRetries, next, sent, keys, shard)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := schema.Migrate(ctx, db.DB, "outbox_a"); err != nil {
			t.Fatalf("Migrate #%d: %v", i+1, err)
		}
	}
	var create1, create2 string
	var name string
	if err := db.QueryRow("SHOW CREATE TABLE outbox_a").Scan(&name, &create1); err != nil {
		t.Fatal(err)
	}
	if err := schema.Migrate(ctx, db.DB, "outbox_a"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SHOW CREATE TABLE outbox_a").Scan(&name, &create2); err != nil {
		t.Fatal(err)
	}
	if create1 != create2 {
		t.Fatalf("Migrate on an up-to-date table changed it:\n%s\n---\n%s", create1, create2)
	}
}

// TestMigrateUpgradesSeedTable creates the table with seed 002's own DDL (only its
// MySQL-only collation removed, as MariaDB needs), fills it, and upgrades it in place.
func TestMigrateUpgradesSeedTable(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	ddl, err := os.ReadFile("testdata/classicrelay.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(string(ddl)); err != nil {
		t.Fatalf("seed DDL: %v", err)
	}
	// Seed 002 uses snowflake ids chosen by the application.
	type row struct {
		id                                 int64
		msgID, topic, tag, content, reason string
		status, retries, maxRetries        int
		next                               int64
	}
	seed := []row{
		{1869000000000000001, "a", "venue", "stock_reduce", `{"orderSn":"A1"}`, "", 0, 0, 5, 0},
		{1869000000000000002, "b", "order", "delay_close", `{"orderSn":"A2"}`, "timeout", 1, 2, 5, 1700000000000},
		{1869000000000000003, "c", "order", "delay_close", `{"orderSn":"A3"}`, "", 2, 0, 3, 0},
		{1869000000000000004, "d", "venue", "stock_reduce", "中文内容", "boom", 3, 4, 3, 0},
	}
	for _, r := range seed {
		_, err := db.Exec(`INSERT INTO local_message (id, msg_id, topic, tag, content, status, fail_reason, retry_count, max_retry_count, next_retry_time)
			VALUES (?, ?, ?, ?, ?, ?, NULLIF(?, ''), ?, ?, ?)`, r.id, r.msgID, r.topic, r.tag, r.content, r.status, r.reason, r.retries, r.maxRetries, r.next)
		if err != nil {
			t.Fatal(err)
		}
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"not auto_increment id", "narrow column content",
		"missing column msg_keys", "missing column sharding_key", "missing column properties", "missing column sent_time",
		"missing index idx_sharding_id",
		"missing stored-position journal local_message_stored",
	}
	got := map[string]bool{}
	for _, p := range problems {
		got[p.Kind+" "+p.Object] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("Check did not report %q; got %v", w, problems)
		}
	}
	if len(problems) != len(want) {
		t.Errorf("Check reported %d problems, want %d: %v", len(problems), len(want), problems)
	}

	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	assertUpToDate(t, db.DB, "local_message")

	for _, r := range seed {
		var got row
		var reason *string
		err := db.QueryRow(`SELECT id, msg_id, topic, tag, content, status, fail_reason, retry_count, max_retry_count, next_retry_time
			FROM local_message WHERE id = ?`, r.id).Scan(&got.id, &got.msgID, &got.topic, &got.tag, &got.content, &got.status, &reason, &got.retries, &got.maxRetries, &got.next)
		if err != nil {
			t.Fatalf("row %d after upgrade: %v", r.id, err)
		}
		if reason != nil {
			got.reason = *reason
		}
		if got != r {
			t.Errorf("row changed by upgrade:\n got %+v\nwant %+v", got, r)
		}
	}
	// New rows without an explicit id continue after the seed's ids.
	if _, err := db.Exec(schema.InsertSQL, "e", "venue", "", "{}", ""); err != nil {
		t.Fatal(err)
	}
	var id int64
	if err := db.QueryRow("SELECT id FROM local_message WHERE msg_id = 'e'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if id <= seed[len(seed)-1].id {
		t.Fatalf("new id %d not after the seed ids", id)
	}
}

func TestMigrateRefusesIncompatibleColumn(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	if _, err := db.Exec("CREATE TABLE outbox_bad (id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, msg_id int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	err := schema.Migrate(context.Background(), db.DB, "outbox_bad")
	if err == nil || !strings.Contains(err.Error(), "wrong type msg_id") {
		t.Fatalf("Migrate = %v, want an error naming the wrong type of msg_id", err)
	}
}

func TestValidateIdent(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"local_message", "_x", "Outbox2", strings.Repeat("a", 64)} {
		if err := schema.ValidateIdent(ok); err != nil {
			t.Errorf("ValidateIdent(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "1abc", "a-b", "a b", "t;DROP TABLE x", "`t`", "db.table", strings.Repeat("a", 65), "tä"} {
		err := schema.ValidateIdent(bad)
		if err == nil {
			t.Errorf("ValidateIdent(%q) = nil, want an error", bad)
			continue
		}
		if bad != "" && !strings.Contains(err.Error(), "not a plain SQL identifier") {
			t.Errorf("ValidateIdent(%q) error %q does not say why", bad, err)
		}
	}
	if _, err := schema.DDL("x;y"); err == nil {
		t.Fatal("DDL accepted an invalid table name")
	}
	if err := schema.Migrate(context.Background(), nil, "bad name"); err == nil || !strings.Contains(err.Error(), "bad name") {
		t.Fatalf("Migrate with a bad name = %v, want an error naming it", err)
	}
}

func assertUpToDate(t *testing.T, db *sql.DB, table string) {
	t.Helper()
	problems, err := schema.Check(context.Background(), db, table)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 0 {
		t.Fatalf("Check after Migrate = %v, want none", problems)
	}
}

// TestNarrowColumnsReportedAndWidened is issue 26, row 13 (and issue 23, row 4): an adopted
// table whose content is text (64 KiB) or whose writer columns are narrower than the
// contract passes no longer as up to date; migrate widens them, keeping their comments, and
// a 70 KB body then fits. A narrow column is not fatal: the relay runs on such a table.
func TestNarrowColumnsReportedAndWidened(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY content text NOT NULL COMMENT 'the body', MODIFY sharding_key varchar(32) NOT NULL DEFAULT ''",
		"INSERT INTO local_message (msg_id, topic, content) VALUES ('old', 't', 'kept')",
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 70_000)
	if _, err := db.Exec(schema.InsertSQL, "big-before", "t", "", big, ""); err == nil {
		t.Fatal("a 70 KB body fitted a text column: the test proves nothing")
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range problems {
		got[p.Kind+" "+p.Object] = true
		if p.Fatal() {
			t.Errorf("fatal problem %v on a table the relay can run on", p)
		}
	}
	if len(problems) != 2 || !got["narrow column content"] || !got["narrow column sharding_key"] {
		t.Fatalf("Check = %v, want content and sharding_key narrow", problems)
	}
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	assertUpToDate(t, db.DB, "local_message")
	if _, err := db.Exec(schema.InsertSQL, "big", "t", "", big, ""); err != nil {
		t.Fatalf("a 70 KB body after migrate: %v", err)
	}
	var comment, kept string
	if err := db.QueryRow("SELECT COLUMN_COMMENT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'local_message' AND COLUMN_NAME = 'content'").Scan(&comment); err != nil || comment != "the body" {
		t.Errorf("content's comment after migrate: %q %v", comment, err)
	}
	if err := db.QueryRow("SELECT content FROM local_message WHERE msg_id = 'old'").Scan(&kept); err != nil || kept != "kept" {
		t.Errorf("old row after migrate: %q %v", kept, err)
	}
}
