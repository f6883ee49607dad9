// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

// The write-back that records positions keeps markSent's plan: on a table with 60,000 sent
// rows behind 1,000 due ones, the statement for 1,000 rows (each column a CASE on id)
// reaches exactly its rows as a range of the primary key, and changes them all.
func TestSentAtWriteBackPlan(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	seedTable(t, db.DB, sentHistory,
		"INSERT INTO local_message (msg_id, topic, content) SELECT CONCAT('due-', seq), 'orders', '{}' FROM seq_1_to_1000",
		"ANALYZE TABLE local_message")
	s := testStore(db.DB)
	var first int64
	if err := db.QueryRow("SELECT MIN(id) FROM local_message WHERE status = 0").Scan(&first); err != nil {
		t.Fatal(err)
	}
	ids := make([]int64, 1000)
	at := make([]*message.Stored, 1000)
	for i := range ids {
		ids[i] = first + int64(i)
		at[i] = &message.Stored{Broker: "broker-" + strconv.Itoa(i%2), QueueID: i % 8, Offset: int64(i), OffsetMsgID: "7F00000100002A9F" + strconv.Itoa(1e15+i)}
	}
	q, args := s.SentAtQuery(0, ids, at, time.Now().UnixMilli())
	for _, p := range testenv.Plan(t, db.DB, "ANALYZE", q, args...) {
		if p["key"] != "PRIMARY" || p["type"] != "range" || p["r_rows"] != "1000.00" {
			t.Errorf("write-back with positions: plan %v; want a range of the primary key reading the 1,000 rows", p)
		}
	}
	if _, err := db.Exec("UPDATE local_message SET status = 0 WHERE msg_id LIKE 'due-%'"); err != nil { // ANALYZE ran it
		t.Fatal(err)
	}
	n, err := s.MarkSentAt(ctx, 0, ids, at, time.Now().UnixMilli())
	if err != nil || n != 1000 {
		t.Fatalf("MarkSentAt changed %d rows: %v; want 1000", n, err)
	}
	var bad int
	if err := db.QueryRow(`SELECT COUNT(*) FROM local_message WHERE msg_id LIKE 'due-%' AND NOT (status = 2 AND broker_name = CONCAT('broker-', (id - ?) % 2)
		AND queue_id = (id - ?) % 8 AND queue_offset = id - ? AND offset_msg_id = CONCAT('7F00000100002A9F', 1000000000000000 + id - ?))`,
		first, first, first, first).Scan(&bad); err != nil || bad != 0 {
		t.Fatalf("%d rows not recorded as given (%v)", bad, err)
	}
}

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
