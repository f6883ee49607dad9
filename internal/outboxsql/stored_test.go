// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"database/sql"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// sentHistory gives a plan test's table 60,000 sent rows: the history the relay's
// statements must not read.
const sentHistory = "INSERT INTO local_message (msg_id, topic, content, status, next_retry_time, sent_time) SELECT CONCAT('sent-', seq), 'orders', '{}', 2, seq, seq FROM seq_1_to_60000"

// seedTable creates local_message in db and runs stmts on it, in order.
func seedTable(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	if err := schema.Migrate(context.Background(), db, "local_message"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range stmts {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// The relay records positions when, and only when, the table has its stored-position
// journal: HasPositions follows the journal (schema.HasStoredLog), not columns of the
// outbox table, and the write-back that marks rows sent is the plain one either way.
func TestHasPositionsFollowsTheJournal(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	seedTable(t, db.DB, "DROP TABLE IF EXISTS "+schema.QuoteIdent(schema.StoredLogTable("local_message")))
	s := testStore(db.DB)
	if err := s.ScanIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if s.HasPositions() {
		t.Fatal("HasPositions without the journal")
	}
	ddl, err := schema.StoredLogDDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	s = testStore(db.DB)
	if err := s.ScanIndex(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.HasPositions() {
		t.Fatal("no HasPositions with the journal")
	}
}
