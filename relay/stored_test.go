// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

// createJournal creates local_message's stored-position journal in db.
func createJournal(t testing.TB, db *sql.DB) {
	t.Helper()
	ddl, err := schema.StoredLogDDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
}

// journaled is one row's position as local_message's journal records it, with the time of
// the write-back that marked it sent (the entry's).
type journaled struct {
	pos       storedlog.Pos
	settledMs int64
}

// readJournal returns every row the journal of local_message records, by id (a row in
// several entries: the last), and fails the test on an entry that does not decode.
func readJournal(t testing.TB, db *sql.DB) map[int64]journaled {
	t.Helper()
	j, err := storedlog.Open(db, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := j.Window(context.Background(), 0, math.MaxInt64, storedlog.Cursor{}, true, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]journaled{}
	for _, e := range entries {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
		for _, p := range e.Positions {
			out[p.ID] = journaled{p, e.SettledMs}
		}
	}
	return out
}

// sentRows returns the ids of local_message's sent rows by msg_id, with their
// next_retry_time (the time of the write-back that marked them sent).
func sentRows(t testing.TB, db *sql.DB) map[string][2]int64 {
	t.Helper()
	rows, err := db.Query("SELECT msg_id, id, next_retry_time FROM local_message WHERE status = 2")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][2]int64{}
	for rows.Next() {
		var msgID string
		var v [2]int64
		if err := rows.Scan(&msgID, &v[0], &v[1]); err != nil {
			t.Fatal(err)
		}
		out[msgID] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkJournal fails the test unless every message of topics at b's broker is recorded in
// the journal, at the position the broker stored it, in the entry of the write-back that
// marked its row sent; it returns how many it checked.
func checkJournal(t *testing.T, b *bundle, topics ...string) int {
	t.Helper()
	recorded, sent := readJournal(t, b.db.DB), sentRows(t, b.db.DB)
	checked := 0
	for _, topic := range topics {
		for _, m := range b.broker.Messages(topic) {
			msgID := m.Properties[outbox.MsgIDProperty]
			row, ok := sent[msgID]
			got := recorded[row[0]]
			commit, valid := (&message.Stored{OffsetMsgID: m.OffsetMsgID}).CommitLogOffset()
			want := journaled{storedlog.Pos{ID: row[0], Broker: m.BrokerName, QueueID: m.QueueID, Offset: m.QueueOffset, CommitOffset: commit}, row[1]}
			if !ok || !valid || got != want {
				t.Errorf("%s (row %v): recorded %+v, the broker stored it at %+v", msgID, row, got, want)
			}
			checked++
		}
	}
	return checked
}

// Every sent row's position is in the table's stored-position journal: batches (unordered
// rows of one topic), ordered lanes (keys of one queue batched) and single sends alike. Each
// recorded (broker, queue, offset, commit log offset) is the broker's own position of that
// message, found by its OUTBOX_MSG_ID, in an entry settled at the row's next_retry_time.
func TestSentRowsRecordWhereTheBrokerStoredThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createJournal(t, b.db.DB)
	cfg := b.config()
	cfg.DisableNudge = true
	cfg.RecordPositions = true
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "orders", Route: relay.Route{Ordered: true}}, relay.PatternRule{Topic: "*"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Router = router
	r := b.newRelay(t, cfg)
	var msgs []outbox.Message
	for i := 0; i < 300; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("u%03d", i), Topic: "events", Body: []byte("x")})
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("o%03d", i), Topic: "orders", ShardingKey: fmt.Sprintf("k%d", i%7), Body: []byte("y")})
	}
	msgs = append(msgs, outbox.Message{MsgID: "single", Topic: "alone", Body: []byte("z")})
	b.insert(t, msgs...)
	ctx := context.Background()
	for countWhere(t, b.db.DB, "status <> 2") > 0 {
		if _, err := r.DrainOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if checked := checkJournal(t, b, "events", "orders", "alone"); checked != len(msgs) {
		t.Fatalf("checked %d messages at the broker, want %d", checked, len(msgs))
	}
}

// A table without its journal (one not migrated since) is relayed as before with
// RecordPositions on: every row is sent and marked sent, nothing is recorded.
func TestSentWithoutJournal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Exec("DROP TABLE IF EXISTS " + schema.QuoteIdent(schema.StoredLogTable("local_message"))); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.DisableNudge = true
	cfg.RecordPositions = true
	r := b.newRelay(t, cfg)
	var msgs []outbox.Message
	for i := 0; i < 50; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("n%02d", i), Topic: "events", Body: []byte("x")})
	}
	b.insert(t, msgs...)
	st, err := r.DrainOnce(context.Background())
	if err != nil || st.Sent != 50 || countWhere(t, b.db.DB, "status = 2") != 50 || b.broker.Count("events") != 50 {
		t.Fatalf("drain without the journal: %+v, %v; %s", st, err, statusCounts(t, b.db.DB))
	}
}

// TestPositionsNotRecordedByDefault: without Config.RecordPositions (the broker audit off)
// nothing is appended to the journal.
func TestPositionsNotRecordedByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createJournal(t, b.db.DB)
	cfg := b.config()
	cfg.DisableNudge = true
	r := b.newRelay(t, cfg)
	var msgs []outbox.Message
	for i := 0; i < 50; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("d%03d", i), Topic: "events", Body: []byte("x")})
	}
	b.insert(t, msgs...)
	for countWhere(t, b.db.DB, "status <> 2") > 0 {
		if _, err := r.DrainOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(readJournal(t, b.db.DB)); n != 0 {
		t.Fatalf("%d sent rows have a position recorded with RecordPositions off", n)
	}
}

// TestJournalRefusedNeverHoldsDelivery: the journal dropped while the relay runs (its
// appends refused from then on). Every row is still sent and marked sent, the run goes on
// and shuts down as usual, and every row whose position could not be recorded is counted
// in outbox_relay_audit_unrecorded_rows_total.
func TestJournalRefusedNeverHoldsDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	createJournal(t, b.db.DB)
	reg := prometheus.NewRegistry()
	cfg := b.config()
	cfg.RecordPositions = true
	cfg.Metrics = relay.NewMetrics(reg)
	r := b.newRelay(t, cfg)
	stop := run(t, r)
	var first []outbox.Message
	for i := 0; i < 20; i++ {
		first = append(first, outbox.Message{MsgID: fmt.Sprintf("a%03d", i), Topic: "events", Body: []byte("x")})
	}
	b.insert(t, first...)
	eventually(t, 30*time.Second, "the first rows recorded", func() bool { return len(readJournal(t, b.db.DB)) == len(first) })
	if _, err := b.db.Exec("DROP TABLE " + schema.QuoteIdent(schema.StoredLogTable("local_message"))); err != nil {
		t.Fatal(err)
	}
	var msgs []outbox.Message
	for i := 0; i < 300; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("b%03d", i), Topic: "events", Body: []byte("x")})
	}
	b.insert(t, msgs...)
	eventually(t, 30*time.Second, "every row sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == len(first)+len(msgs) })
	stop()
	if got := metricValue(t, reg, "outbox_relay_audit_unrecorded_rows_total", "local_message"); got != float64(len(msgs)) {
		t.Fatalf("unrecorded rows counted: %v, want %d", got, len(msgs))
	}
	if n := b.broker.Count("events"); n != len(first)+len(msgs) {
		t.Fatalf("broker holds %d messages, want %d", n, len(first)+len(msgs))
	}
}
