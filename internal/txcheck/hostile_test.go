// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// forgeHalf sends, as any producer on the broker can, a half that names the check group and
// carries props; a body of 4 KiB or more is compressed by the client.
func (w *world) forgeHalf(body []byte, props map[string]string) {
	w.t.Helper()
	m := primitive.NewMessage(topic, body)
	m.WithProperty(primitive.PropertyTransactionPrepared, "true")
	m.WithProperty(primitive.PropertyProducerGroup, checkGroup)
	for k, v := range props {
		m.WithProperty(k, v)
	}
	res, err := w.sender.SendSync(w.ctx, m)
	if err != nil || res.Status != primitive.SendOK {
		w.t.Fatalf("forged half: %v %v", res, err)
	}
}

// dropped returns the checks the responder dropped unanswered for reason.
func (w *world) dropped(reason string) int {
	w.t.Helper()
	return w.counter("outbox_relay_transaction_checks_dropped_total", map[string]string{"reason": reason})
}

// Forged halves with compressed bodies that inflate to 4 MiB each: the responder answers
// their checks without ever inflating a body (the decision reads properties only), so the
// memory it allocates stays far below one inflated body per check.
func TestForgedCompressedChecksNotInflated(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startResponder()
	const n, size = 16, 4 << 20
	bomb := make([]byte, size) // zeros: about 4 KiB compressed
	for i := 0; i < n; i++ {
		w.forgeHalf(bomb, map[string]string{outbox.MsgIDProperty: fmt.Sprintf("bomb-%d", i), outbox.WriterProperty: "c"})
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if sent := w.broker.TriggerCheck(); sent != n {
		t.Fatalf("%d checks sent, want %d", sent, n)
	}
	testenv.Eventually(t, 10*time.Second, "every forged check handled", func() bool {
		return w.handled() == n
	})
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > size {
		t.Fatalf("answering %d checks of compressed bodies allocated %d MiB: bodies were inflated", n, grown>>20)
	}
}

// A flood of signed checks while every worker is busy: the checks beyond the queue are
// dropped (the broker checks again at its next round) instead of each holding a goroutine.
// Unsigned ones are answered on arrival and never queued (TestForgedHalfLeavesADeliverAtRowAlone).
func TestCheckFloodBoundedQueue(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	gate := make(chan struct{})
	defer close(gate)
	w.hold, w.workers, w.queueSize = gate, 1, 4
	w.startResponder()
	const n = 300
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("flood-%d", i) // signed: these reach the queue
		w.forgeHalf([]byte("x"), map[string]string{outbox.MsgIDProperty: id, outbox.WriterProperty: "c",
			outbox.SignatureProperty: outbox.SignHalf(checkSecret, table, id, topic)})
	}
	base := runtime.NumGoroutine()
	if sent := w.broker.TriggerCheck(); sent != n {
		t.Fatalf("%d checks sent, want %d", sent, n)
	}
	// One check is held by the worker and four wait in the queue; the rest are dropped, or,
	// without a bound, each waits in a goroutine of its own.
	testenv.Eventually(t, 10*time.Second, "the flood received", func() bool {
		return w.dropped("queue_full") >= n-5 || runtime.NumGoroutine()-base >= n/2
	})
	if g := runtime.NumGoroutine() - base; g > 20 {
		t.Fatalf("%d goroutines more during a flood of %d checks, want a bounded number", g, n)
	}
	if d := w.dropped("queue_full"); d != n-5 {
		t.Fatalf("%d checks dropped, want %d", d, n-5)
	}
}

// nextRetry returns the row's next_retry_time.
func (w *world) nextRetry(msgID string) int64 {
	w.t.Helper()
	var n int64
	if err := w.db.QueryRowContext(w.ctx, "SELECT next_retry_time FROM "+table+" WHERE msg_id = ?", msgID).Scan(&n); err != nil {
		w.t.Fatal(err)
	}
	return n
}

// A forged half naming the check group and a victim's msg_id (unsigned, or signed with
// another secret) does not pull the victim's DeliverAt row forward: it is answered
// UNKNOWN and the row keeps its due time.
func TestForgedHalfLeavesADeliverAtRowAlone(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startResponder()
	wr, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	victim := &outbox.Message{MsgID: "scheduled-1", Topic: topic, Body: []byte("later"), DeliverAt: time.Now().Add(time.Hour)}
	tx, err := w.db.BeginTx(w.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wr.Insert(w.ctx, tx, victim); err != nil {
		t.Fatal(err)
	}
	w.commit(tx)
	due := w.nextRetry(victim.MsgID)
	w.forgeHalf([]byte("x"), map[string]string{outbox.MsgIDProperty: victim.MsgID, outbox.WriterProperty: "c", "KEYS": victim.MsgID})
	w.forgeHalf([]byte("x"), map[string]string{outbox.MsgIDProperty: victim.MsgID, outbox.WriterProperty: "c", "KEYS": victim.MsgID,
		outbox.SignatureProperty: outbox.SignHalf("another-secret-0123456", table, victim.MsgID, topic)})
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "both checks handled", func() bool { return w.handled() == 2 })
	if got := w.nextRetry(victim.MsgID); got != due {
		t.Fatalf("next_retry_time %d after forged checks, want %d (an hour out)", got, due)
	}
	if n := w.answers("unknown", txcheck.ReasonForged); n != 2 {
		t.Fatalf("%d checks answered unknown/%s, want 2", n, txcheck.ReasonForged)
	}
}

// A forged half naming a msg_id not written yet, with no OUTBOX_TX, fences nothing even
// with fencing on: the writer's real insert of that msg_id later succeeds.
func TestForgedHalfFencesNothing(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.fence = true
	w.startResponder()
	w.forgeHalf([]byte("x"), map[string]string{outbox.MsgIDProperty: "future-1", "KEYS": "future-1"})
	for i := 1; i <= 6; i++ {
		if w.broker.TriggerCheck() == 0 {
			break // the half was resolved
		}
		testenv.Eventually(t, 5*time.Second, "the check handled", func() bool { return w.handled() == i })
	}
	if _, err := w.db.ExecContext(w.ctx, "INSERT INTO "+table+" (msg_id, topic, content) VALUES ('future-1', ?, 'real')", topic); err != nil {
		t.Fatalf("the real insert after forged checks: %v", err)
	}
}

// A forged half naming a victim's handed row, sent before the victim's own half, is not
// committed: the victim's genuine half is, so the message delivered is the victim's, once.
// Acting on the forged half would commit the attacker's body, mark the row sent and then
// roll the genuine half back.
func TestForgedHalfCannotCommitForAHandedRow(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startResponder()
	const id = "victim-handed-1"
	w.forgeHalf([]byte("forged"), map[string]string{outbox.MsgIDProperty: id, outbox.WriterProperty: "h", "KEYS": "order-genuine"})
	tx, err := w.db.BeginTx(w.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.handedWriter().Prepare(w.ctx, tx, &outbox.Message{MsgID: id, Topic: topic, Body: []byte("genuine"), Keys: []string{"order-genuine"}})
	if err != nil || h.Relayed() {
		t.Fatalf("prepare: %v (relayed %v)", err, h.Relayed())
	}
	if _, err := tx.ExecContext(w.ctx, "UPDATE "+table+" SET status = 4 WHERE msg_id = ?", id); err != nil {
		t.Fatal(err)
	}
	w.commit(tx) // the writer dies before its END
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the row marked sent", func() bool { return w.status(id) == int(outbox.StatusSent) })
	var bodies []string
	for _, m := range w.broker.Messages(topic) {
		if m.Properties[outbox.MsgIDProperty] == id {
			bodies = append(bodies, string(m.Body))
		}
	}
	if len(bodies) != 1 || bodies[0] != "genuine" {
		t.Fatalf("delivered %q, want the genuine body once", bodies)
	}
}
