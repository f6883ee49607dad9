// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// What one round of the audit costs the database, counted at the driver (testenv.CountedDB
// forwards every statement to MariaDB): a batch of 100 rows the broker holds is one read of
// the database clock, one read of the journal's entries, one read of the rows and one UPDATE
// marking the entries audited (nothing is written per row); a batch of 100 rows the broker
// lost (each with a reason of its own, naming its offset) the same, and one repair UPDATE
// setting each row's reason. A statement per row or per entry, or a second clock read,
// fails it.
func TestAuditBatchStatementCount(t *testing.T) {
	db, broker := AuditTable(t, "held", "lost")
	ctx := context.Background()
	sendRows(t, db, broker, 100)
	// Sent a minute ago by the database's clock, so that the window (MinAge 1 s) holds them.
	for _, q := range []string{"UPDATE local_message SET next_retry_time = next_retry_time - 60000 WHERE status = 2",
		"UPDATE local_message_stored SET settled_time = settled_time - 60000"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	adb, counter := testenv.CountedDB(t, db.DSN)
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{broker.NameServerAddr()}})
	a, err := New(adb, lookup, Config{Database: "test", Table: "local_message", MinAge: time.Second, MaxAge: time.Hour,
		Rate: 1e6, Batch: 100, Sleep: func(ctx context.Context, _ time.Duration) bool { return ctx.Err() == nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.prepare(ctx); err != nil {
		t.Fatal(err)
	}

	counter.Keep()
	a.round(ctx, storedlog.Cursor{})
	if s := a.State(); s.Checked != 100 || s.Missing != 0 {
		t.Fatalf("first round: %+v; want the 100 rows held found present", s)
	}
	wantStatements(t, counter, "a batch of 100 rows present", 3, 1)
	if n := AuditedRows(t, db.DB, "local_message"); n != 100 {
		t.Fatalf("%d rows audited after the first round; want the 100 held", n)
	}

	// 100 rows recorded at offsets 1000+ of empty queues: the tail the broker lost.
	insertSent(t, db, "lost", 100, 30000, 1000)
	counter.Keep()
	a.round(ctx, storedlog.Cursor{})
	if s := a.State(); s.Checked != 200 || s.Missing != 100 || s.Repaired != 100 {
		t.Fatalf("second round: %+v; want the 100 rows lost found missing and repaired", s)
	}
	wantStatements(t, counter, "a batch of 100 rows missing", 3, 2)
	var repaired int
	if err := db.QueryRow(`SELECT COUNT(*) FROM local_message WHERE topic = 'lost' AND status = 1 AND retry_count = 0
		AND fail_reason LIKE CONCAT('%so offset ', 1000 + CAST(SUBSTRING(msg_id, 3) AS UNSIGNED), ' is gone%')`).
		Scan(&repaired); err != nil || repaired != 100 {
		t.Fatalf("%d rows repaired with the reason naming their own offset (%v); want 100", repaired, err)
	}
}

// wantStatements fails unless the statements counted since Keep are reads reads and writes
// writes, and nothing else.
func wantStatements(t *testing.T, c *testenv.StatementCounter, what string, reads, writes int64) {
	t.Helper()
	if got := c.Counts(); got != (testenv.Counts{Reads: reads, Writes: writes}) {
		t.Errorf("%s: %+v; want %d reads, %d writes, nothing else; sent:", what, got, reads, writes)
		for _, s := range c.Statements() {
			t.Logf("  %.160s", s)
		}
	}
}

// sendRows writes n rows on topic "held" and drains them with a relay that records where the
// broker stored each.
func sendRows(t *testing.T, db *testenv.DB, broker *rmqtest.Server, n int) {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: "h-" + strconv.Itoa(i+1), Topic: "held", Body: []byte("{}")}
	}
	ctx := context.Background()
	if err := w.InsertNoTx(ctx, db.DB, msgs); err != nil {
		t.Fatal(err)
	}
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	rdb, prefix := testenv.Redis(t)
	r, err := relay.New(db.DB, rdb, pub, relay.Config{RecordPositions: true, DisableNudge: true, LockKey: prefix + "lock",
		LockTTL: 3 * time.Second, Backoff: backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	DrainAll(t, r, n)
}
