// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// Every sent row records where the broker stored it, in the write-back that marks it sent:
// batches (unordered rows of one topic), ordered lanes (keys of one queue batched) and single
// sends alike. Each recorded (broker, queue, offset, offset msg id) is the broker's own
// position of that message, found by its OUTBOX_MSG_ID (the commit log offset of its offset
// msg id).
func TestSentRowsRecordWhereTheBrokerStoredThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
	type pos struct {
		broker         string
		queue          int
		offset, commit int64
		audited        bool
	}
	recorded := map[string]pos{}
	rows, err := b.db.Query("SELECT msg_id, stored_broker, stored_queue, stored_offset, stored_commit_offset, stored_audit_time <> 0 FROM local_message")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var p pos
		if err := rows.Scan(&id, &p.broker, &p.queue, &p.offset, &p.commit, &p.audited); err != nil {
			t.Fatal(err)
		}
		recorded[id] = p
	}
	checked := 0
	for _, topic := range []string{"events", "orders", "alone"} {
		for _, m := range b.broker.Messages(topic) {
			id := m.Properties[outbox.MsgIDProperty]
			got, ok := recorded[id]
			commit, valid := (&message.Stored{OffsetMsgID: m.OffsetMsgID}).CommitLogOffset()
			want := pos{broker: m.BrokerName, queue: m.QueueID, offset: m.QueueOffset, commit: commit}
			if !ok || !valid || got != want {
				t.Errorf("%s: recorded %+v, the broker stored it at %+v", id, got, want)
			}
			checked++
		}
	}
	if checked != len(msgs) {
		t.Fatalf("checked %d messages at the broker, want %d", checked, len(msgs))
	}
}

// A table without the audit columns (a table migrated before them) is relayed as before:
// every row is sent and marked sent, nothing is recorded.
func TestSentWithoutAuditColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Exec("ALTER TABLE local_message DROP COLUMN stored_broker, DROP COLUMN stored_queue, DROP COLUMN stored_offset, DROP COLUMN stored_commit_offset, DROP COLUMN stored_audit_time"); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.DisableNudge = true
	r := b.newRelay(t, cfg)
	var msgs []outbox.Message
	for i := 0; i < 50; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("n%02d", i), Topic: "events", Body: []byte("x")})
	}
	b.insert(t, msgs...)
	ctx := context.Background()
	st, err := r.DrainOnce(ctx)
	if err != nil || st.Sent != 50 || countWhere(t, b.db.DB, "status = 2") != 50 || b.broker.Count("events") != 50 {
		t.Fatalf("drain without audit columns: %+v, %v; %s", st, err, statusCounts(t, b.db.DB))
	}
}

// TestPositionsNotRecordedByDefault: without Config.RecordPositions (the broker audit off)
// the write-back leaves the audit columns alone, so a sent row keeps its length and is
// updated in place.
func TestPositionsNotRecordedByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
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
	if n := countWhere(t, b.db.DB, "stored_broker <> '' OR stored_queue <> -1 OR stored_offset <> -1 OR stored_commit_offset <> -1"); n != 0 {
		t.Fatalf("%d sent rows have a position recorded with RecordPositions off", n)
	}
}
