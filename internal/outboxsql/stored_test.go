// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
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
	if err := db.QueryRow(`SELECT COUNT(*) FROM local_message WHERE msg_id LIKE 'due-%' AND NOT (status = 2 AND stored_broker = CONCAT('broker-', (id - ?) % 2)
		AND stored_queue = (id - ?) % 8 AND stored_offset = id - ? AND stored_commit_offset = CAST(CONV(1000000000000000 + id - ?, 16, 10) AS SIGNED)
		AND stored_audit_time = 0)`,
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

// A position is recorded only as the fixed-width columns hold it unchanged: a broker name
// over schema.StoredBrokerMax characters, not ASCII, or with a space the CHAR column would
// drop records nothing (a strict server would refuse the whole write-back, a lax one store
// another name); an offset msg id that is not one records the position without its commit
// log offset.
func TestStoredValuesFitTheColumns(t *testing.T) {
	none := storedRow{broker: "", queue: -1, offset: -1, commit: -1}
	long := strings.Repeat("b", schema.StoredBrokerMax)
	for _, c := range []struct {
		in   *message.Stored
		want storedRow
	}{
		{nil, none},
		{&message.Stored{Broker: "broker-a", QueueID: 3, Offset: 42, OffsetMsgID: "C0A8000100002A9F000000000000ABCD"}, storedRow{"broker-a", 3, 42, 0xABCD}},
		{&message.Stored{Broker: long, QueueID: 0, Offset: 0, OffsetMsgID: "20010DB800000000000000000000000100002A9F00000000000000FF"}, storedRow{long, 0, 0, 255}},
		{&message.Stored{Broker: "broker-a", QueueID: 1, Offset: 2, OffsetMsgID: "not hex"}, storedRow{"broker-a", 1, 2, -1}},
		{&message.Stored{Broker: long + "b", QueueID: 1, Offset: 2}, none},
		{&message.Stored{Broker: "brøker", QueueID: 1, Offset: 2}, none},
		{&message.Stored{Broker: "broker-a ", QueueID: 1, Offset: 2}, none},
		{&message.Stored{Broker: "", QueueID: 1, Offset: 2}, none},
		{&message.Stored{Broker: "broker-a", QueueID: -1, Offset: 2}, none},
	} {
		if got := storedValues(c.in); got != c.want {
			t.Errorf("storedValues(%+v) = %+v, want %+v", c.in, got, c.want)
		}
	}
}
