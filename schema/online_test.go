// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// previousLayout creates table as the contract had it before issue 21: the same columns,
// with the (status, update_time) index.
func previousLayout(t *testing.T, db *testenv.DB, table string) {
	t.Helper()
	ddl, err := schema.DDL(table)
	if err != nil {
		t.Fatal(err)
	}
	journal, _ := schema.StoredLogDDL(table)
	for _, q := range []string{ddl, journal} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec("ALTER TABLE " + table + " ADD INDEX idx_status_update (status, update_time)"); err != nil {
		t.Fatal(err)
	}
}

// A table of the previous layout reports its (status, update_time) index as obsolete, not
// fatal; migrate drops it with one online ALTER and leaves an index of the same columns
// under the user's own name alone.
func TestObsoleteIndexDroppedOnline(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	previousLayout(t, db, "local_message")
	if _, err := db.Exec("ALTER TABLE local_message ADD INDEX my_recent (status, update_time)"); err != nil {
		t.Fatal(err)
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || problems[0].Kind != "obsolete index" || problems[0].Object != "idx_status_update" || problems[0].Fatal() {
		t.Fatalf("Check = %v, want one non-fatal obsolete index idx_status_update", problems)
	}
	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || !steps[0].Online || steps[0].Alter != "DROP INDEX `idx_status_update`" {
		t.Fatalf("Plan = %+v, want one online DROP INDEX", steps)
	}
	if err := schema.Apply(ctx, db.DB, "local_message", steps, false); err != nil {
		t.Fatal(err)
	}
	assertUpToDate(t, db.DB, "local_message")
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'local_message' AND INDEX_NAME = 'my_recent'`).Scan(&n); err != nil || n != 2 {
		t.Fatalf("the user's index: %d columns, %v", n, err)
	}
}

// Migrating a live table: writers (internal/loadgen: committing, holding transactions open,
// rolling back) keep committing while migrate brings a large table of an older layout (the
// (status, update_time) and (sharding_key, status, id) indexes) to the contract, even
// while an application transaction holds the table open: an ALTER waits for the table's
// metadata lock behind that transaction, and unbounded, every writer would queue behind the
// ALTER until the transaction ends. No committed row is lost.
func TestMigrateKeepsWritersCommitting(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	previousLayout(t, db, "local_message")
	if _, err := db.Exec("ALTER TABLE local_message DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"); err != nil {
		t.Fatal(err)
	}
	// A history to index: 200,000 sent rows (MariaDB's sequence engine).
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, sharding_key, next_retry_time, sent_time)
		SELECT CONCAT('h-', seq), 'orders', REPEAT('x', 200), 2, CONCAT('k', seq % 5000), seq, seq FROM seq_1_to_200000`); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.Config{Table: "local_message"})
	if err != nil {
		t.Fatal(err)
	}
	app, err := loadgen.NewApp(ctx, db.DB, w, "orders", false)
	if err != nil {
		t.Fatal(err)
	}
	ledger := loadgen.NewLedger()
	stopWriters := app.Start(loadgen.Busy, ledger, "")
	defer stopWriters()

	// An application transaction that wrote to the table and stays open.
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES ('held', 'orders', 'x')"); err != nil {
		t.Fatal(err)
	}

	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || !steps[0].Online || !strings.Contains(steps[0].Alter, "DROP INDEX `idx_status_update`") ||
		!strings.Contains(steps[0].Alter, "DROP INDEX `idx_sharding_status`") || !strings.Contains(steps[0].Alter, "ADD INDEX `idx_sharding_id`") {
		t.Fatalf("Plan = %+v, want one online ALTER", steps)
	}
	before := ledger.Commits()
	migrated := make(chan error, 1)
	go func() { migrated <- schema.Apply(ctx, db.DB, "local_message", steps, false) }()

	// Writers go on committing while the migration waits for the open transaction.
	const want = 100 // 0.6 s of the writers' commits
	deadline := time.Now().Add(30 * time.Second)
	for ledger.Commits() < before+want {
		select {
		case err := <-migrated:
			t.Fatalf("migrate ended (%v) while a transaction held the table open", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("writers committed %d transactions in 30 s of migrate waiting behind an open transaction, want %d", ledger.Commits()-before, want)
		}
		time.Sleep(50 * time.Millisecond) // polling the ledger
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatalf("migrate: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("migrate did not end after the open transaction did")
	}
	during := ledger.Commits() - before
	if err := stopWriters(); err != nil {
		t.Fatalf("a writer failed: %v", err)
	}
	assertUpToDate(t, db.DB, "local_message")

	committed := ledger.Committed()
	var found int
	rows, err := db.Query("SELECT msg_id FROM local_message WHERE msg_id NOT LIKE 'h-%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		got[id] = true
	}
	for id := range committed {
		if got[id] {
			found++
		}
	}
	if found != len(committed) || !got["held"] {
		t.Fatalf("%d of %d committed rows in the table after migrate (held row: %v)", found, len(committed), got["held"])
	}
	t.Logf("%d transactions committed during the migration, %d in all", during, len(committed))
}

// A table with the ordered check's previous index, (sharding_key, status, id), reports it as
// obsolete under its own name only and the (sharding_key, id) index as missing; migrate
// swaps them in one online ALTER, leaving an index of the old columns under the user's own
// name alone.
func TestOrderedCheckIndexSwappedOnline(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	ddl, err := schema.DDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	journal, _ := schema.StoredLogDDL("local_message")
	for _, q := range []string{ddl, journal} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`ALTER TABLE local_message DROP INDEX idx_sharding_id,
		ADD INDEX idx_sharding_status (sharding_key, status, id), ADD INDEX my_key_status (sharding_key, status, id)`); err != nil {
		t.Fatal(err)
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, p := range problems {
		got[p.Kind+" "+p.Object] = true
	}
	if len(problems) != 2 || !got["obsolete index idx_sharding_status"] || !got["missing index idx_sharding_id"] {
		t.Fatalf("Check = %v, want obsolete index idx_sharding_status and missing index idx_sharding_id", problems)
	}
	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || !steps[0].Online || !strings.Contains(steps[0].Alter, "DROP INDEX `idx_sharding_status`") ||
		!strings.Contains(steps[0].Alter, "ADD INDEX `idx_sharding_id`") || strings.Contains(steps[0].Alter, "my_key_status") {
		t.Fatalf("Plan = %+v, want one online ALTER swapping the indexes", steps)
	}
	if err := schema.Apply(ctx, db.DB, "local_message", steps, false); err != nil {
		t.Fatal(err)
	}
	assertUpToDate(t, db.DB, "local_message")
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE()
		AND TABLE_NAME = 'local_message' AND INDEX_NAME IN ('my_key_status', 'idx_sharding_status')`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("index columns left of my_key_status and idx_sharding_status: %d, %v; want the user's 3 only", n, err)
	}
}
