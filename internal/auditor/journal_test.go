// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
)

// Journal entries the audit cannot trust never block it: before an entry of 100 rows the
// broker lost, the journal holds an entry that does not decode (damaged or forged bytes), an
// entry naming rows by a send that is not theirs (their next_retry_time differs) and a row
// that does not exist, and an entry whose row sits on a broker no route knows. The audit
// counts the undecodable entry (outbox_relay_audit_corrupt_entries_total) and passes it,
// skips the rows not sent by the recorded send, repairs the 100 lost rows, and leaves only
// the entry with the unanswered row to be checked again, which the next pass does.
func TestUntrustedJournalEntriesNeverBlock(t *testing.T) {
	db, broker := AuditTable(t, "lost")
	ctx := context.Background()
	insertSent(t, db, "lost", 100, 30000, 1000)
	var settled, first int64
	if err := db.QueryRow("SELECT MIN(next_retry_time), MIN(id) FROM local_message").Scan(&settled, &first); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, next_retry_time, sent_time)
		VALUES ('x-1', 'lost', '{}', 2, ?, 1)`, settled-1); err != nil {
		t.Fatal(err)
	}
	var elsewhere int64
	if err := db.QueryRow("SELECT id FROM local_message WHERE msg_id = 'x-1'").Scan(&elsewhere); err != nil {
		t.Fatal(err)
	}
	forged := []byte{storedlog.Version, 1, 8, 'b', 'r', 'o', 'k', 'e', 'r', '-', 'a', 0xff, 0xff, 0xff, 0xff, 0x0f}
	if _, err := db.Exec(`INSERT INTO local_message_stored (settled_time, first_id, last_id, row_count, positions) VALUES (?, 1, 1, 1, ?)`,
		settled-5, forged); err != nil {
		t.Fatal(err)
	}
	j, err := storedlog.Open(db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(ctx, []storedlog.Entry{
		{SettledMs: settled - 3, Positions: []storedlog.Pos{{ID: first, Broker: "broker-a", Offset: 1, CommitOffset: -1}, {ID: 1 << 40, Broker: "broker-a", CommitOffset: -1}}},
		{SettledMs: settled - 1, Positions: []storedlog.Pos{{ID: elsewhere, Broker: "broker-x", Offset: 1, CommitOffset: -1}}},
	}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{broker.NameServerAddr()}})
	a, err := New(db.DB, lookup, Config{Database: "test", Table: "local_message", MinAge: time.Second, MaxAge: time.Hour,
		Rate: 1e6, Batch: 100, Metrics: NewMetrics(reg), Sleep: func(ctx context.Context, _ time.Duration) bool { return ctx.Err() == nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	pass := func() {
		cur := storedlog.Cursor{}
		for range 10 {
			var done bool
			if cur, done = a.round(ctx, cur); done {
				return
			}
		}
		t.Fatal("the audit did not get through the journal in 10 rounds")
	}
	pass()
	if s := a.State(); s.Corrupt != 1 || s.Checked != 101 || s.Missing != 100 || s.Repaired != 100 || s.Unknown != 1 {
		t.Fatalf("first pass: %+v; want 1 corrupt entry, 100 rows repaired, 1 unknown", s)
	}
	if got := Counter(t, reg, "outbox_relay_audit_corrupt_entries_total", ""); got != 1 {
		t.Fatalf("outbox_relay_audit_corrupt_entries_total = %v, want 1", got)
	}
	want := map[int64]bool{settled - 5: true, settled - 3: true, settled - 1: false, settled: true}
	checkAudited := func() {
		t.Helper()
		rows, err := db.Query("SELECT settled_time, audited_time > 0 FROM local_message_stored")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var at int64
			var audited bool
			if err := rows.Scan(&at, &audited); err != nil {
				t.Fatal(err)
			}
			if audited != want[at] {
				t.Errorf("entry settled %d ms before the lost rows: audited %v, want %v", settled-at, audited, want[at])
			}
		}
	}
	checkAudited()
	pass()
	if s := a.State(); s.Corrupt != 1 || s.Checked != 102 || s.Unknown != 2 || s.Repaired != 100 {
		t.Fatalf("second pass: %+v; want only the unanswered row checked again", s)
	}
	checkAudited()
}
