// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// A check of a handed half whose row is absent (its transaction rolled back and the writer's
// END ROLLBACK lost) is answered UNKNOWN, never ROLLBACK: a relay of another database sharing
// the check group by mistake would otherwise roll back a half whose row it cannot see. The
// broker discards the half after its last check; nothing is delivered or recovered.
func TestHandedRowAbsentLeftToTheDiscard(t *testing.T) {
	w := setup(t, rmqtest.Options{TransactionCheckMax: 2}, time.Hour)
	w.startRelay()
	w.startResponder()
	tx, h := w.prepareHanded("handed-absent")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		w.broker.TriggerCheck()
		testenv.Eventually(t, 5*time.Second, "an UNKNOWN answer", func() bool { return w.answers("unknown", txcheck.ReasonHandedNoRow) == i })
	}
	w.broker.TriggerCheck()
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Discarded {
		t.Fatalf("half %+v, want discarded", hs)
	}
	// The discarded half is read at the responder's next sweep (every 200 ms here): a row
	// committed meanwhile under another msg_id is delivered, the absent one never.
	if _, err := w.db.ExecContext(w.ctx, "INSERT INTO "+table+" (msg_id, topic, content) VALUES ('plain-after', ?, 'x')", topic); err != nil {
		t.Fatal(err)
	}
	w.waitDeliveredOnce("plain-after")
	if w.delivered(h.MsgID()) != 0 || w.recovered() != 0 || w.answers("rollback", txcheck.ReasonRolledBack) != 0 {
		t.Fatalf("%d copies, %d recovered, %d rollbacks; want none", w.delivered(h.MsgID()), w.recovered(), w.answers("rollback", txcheck.ReasonRolledBack))
	}
}

// prepareHanded is what an SDK writer of the handed mode does (the Java recipe of
// docs/sql-recipes.md): the row inserted with status 4 in the business transaction, then
// the half sent while the transaction holds the row.
func (w *world) prepareHanded(body string) (*sql.Tx, *txmsg.Half) {
	w.t.Helper()
	tx, err := w.db.BeginTx(w.ctx, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	h, err := w.handedWriter().Prepare(w.ctx, tx, &outbox.Message{Topic: topic, Body: []byte(body), Keys: []string{"order-" + body}})
	if err != nil {
		w.t.Fatal(err)
	}
	if h.Relayed() {
		w.t.Fatal("the half was not sent")
	}
	if _, err := tx.ExecContext(w.ctx, "UPDATE "+table+" SET status = 4 WHERE msg_id = ?", h.MsgID()); err != nil {
		w.t.Fatal(err)
	}
	return tx, h
}

// handedSender marks the halves it sends as an SDK writer of handed rows does (OUTBOX_TX=h).
type handedSender struct{ txmsg.Sender }

func (s handedSender) SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	for _, m := range msgs {
		m.WithProperty(outbox.WriterProperty, "h")
	}
	return s.Sender.SendSync(ctx, msgs...)
}

// handedWriter is a txmsg producer whose halves are marked as a handed-row writer's; with
// its rows set to status 4 in the transaction and Finish standing for the SDK's END, it
// writes what the Java recipe writes.
func (w *world) handedWriter() *txmsg.Producer {
	w.t.Helper()
	if w.handed == nil {
		wr, err := outbox.NewWriter(outbox.Config{})
		if err != nil {
			w.t.Fatal(err)
		}
		tp, err := txmsg.New(txmsg.Config{Writer: wr, Sender: handedSender{w.sender}, NameServers: []string{w.broker.NameServerAddr()},
			CheckGroup: checkGroup, Secret: checkSecret, Grace: time.Hour, EndTimeout: 500 * time.Millisecond})
		if err != nil {
			w.t.Fatal(err)
		}
		w.t.Cleanup(func() { _ = tp.Close() })
		w.handed = tp
	}
	return w.handed
}

func (w *world) recovered() int {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "outbox_relay_transaction_halves_recovered_total" {
			for _, m := range mf.GetMetric() {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// Handed mode, normal path: the writer's END COMMIT lands; the message is in the topic once
// and the relay, running all along, never sends the row (it stays handed).
func TestHandedRowDeliveredByTheBrokerOnly(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startRelay()
	w.startResponder()
	tx, h := w.prepareHanded("handed-normal")
	w.commit(tx)
	if err := w.handedWriter().Finish(w.ctx, w.db.DB, h, nil); err != nil { // an END that lands
		t.Fatal(err)
	}
	if n := w.delivered(h.MsgID()); n != 1 {
		t.Fatalf("delivered %d times, want once", n)
	}
	// The relay polls every 50 ms: give it many passes, then check it sent nothing.
	if _, err := w.db.ExecContext(w.ctx, "INSERT INTO "+table+" (msg_id, topic, content) VALUES ('plain-after', ?, 'x')", topic); err != nil {
		t.Fatal(err)
	}
	w.waitDeliveredOnce("plain-after") // the relay sends a pending row of its own ...
	if st := w.status(h.MsgID()); st != int(outbox.StatusHanded) {
		t.Fatalf("handed row status %d, want 4", st)
	}
	if n := w.delivered(h.MsgID()); n != 1 { // ... and not the handed one
		t.Fatalf("handed row delivered %d times, want once (the relay sent it)", n)
	}
}

// Handed mode, the writer dies between its commit and its END: the check finds the row
// handed and answers COMMIT; the broker stores the message once and the row is marked sent,
// so a re-check after a broker restart that lost the "resolved" record is answered ROLLBACK
// and stores no second copy. A check while the transaction is open is answered UNKNOWN.
func TestHandedRowCommittedByTheCheck(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startRelay()
	w.startResponder()
	tx, h := w.prepareHanded("handed-killed")
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "an UNKNOWN answer while open", func() bool { return w.answers("unknown", txcheck.ReasonOpen) == 1 })
	w.commit(tx) // ... and the writer dies: no END
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the row marked sent after the COMMIT", func() bool { return w.status(h.MsgID()) == int(outbox.StatusSent) })
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Committed || hs.Commits != 1 || w.delivered(h.MsgID()) != 1 {
		t.Fatalf("half %+v, %d copies; want committed once, one copy", hs, w.delivered(h.MsgID()))
	}
	if w.answers("commit", txcheck.ReasonHanded) != 1 {
		t.Fatal("the check was not answered commit/handed_commit")
	}
	w.broker.SetTxFaults(rmqtest.TxFaults{LoseOpsOnStop: true})
	w.broker.StopBroker()
	if err := w.broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the responder registered again", func() bool { return len(w.broker.Producers(checkGroup)) == 1 })
	if w.half(h.MsgID()).Resolution != rmqtest.Pending {
		t.Skip("the restart kept the op record: nothing to re-check")
	}
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the re-check answered", func() bool { return w.answers("rollback", txcheck.ReasonSent) == 1 })
	if n := w.delivered(h.MsgID()); n != 1 {
		t.Fatalf("%d copies after the re-check, want 1", n)
	}
}

// A check's COMMIT the broker refuses leaves the row handed (not marked sent), and the next
// check commits it: the row is marked sent only on the broker's acknowledgement.
func TestHandedCommitRefusedLeavesTheRowHanded(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startResponder()
	tx, h := w.prepareHanded("handed-refused")
	w.commit(tx)
	w.broker.SetTxFaults(rmqtest.TxFaults{EndTransactionErrorRate: 1})
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "a COMMIT answer", func() bool { return w.answers("commit", txcheck.ReasonHanded) == 1 })
	if st := w.status(h.MsgID()); st != int(outbox.StatusHanded) || w.delivered(h.MsgID()) != 0 {
		t.Fatalf("row status %d, %d copies after a refused COMMIT; want 4 and none", st, w.delivered(h.MsgID()))
	}
	w.broker.SetTxFaults(rmqtest.TxFaults{})
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the row marked sent", func() bool { return w.status(h.MsgID()) == int(outbox.StatusSent) })
	if n := w.delivered(h.MsgID()); n != 1 {
		t.Fatalf("%d copies, want 1", n)
	}
}

// Handed mode, relay down for the whole check window: the checks reach nobody and the broker
// discards the halves into TRANS_CHECK_MAX_TIME_TOPIC. When the relay is back, its responder
// reads them: the handed row becomes pending and the relay sends it once; a rolled-back
// transaction's half and a confirmed writer's row (the relay's already) are left alone.
func TestDiscardedHandedHalfRecovered(t *testing.T) {
	w := setup(t, rmqtest.Options{TransactionCheckMax: 3}, time.Hour)
	tx, handed := w.prepareHanded("handed-discarded")
	w.commit(tx) // the writer dies, its END never sent
	tx, rolled := w.prepareHanded("handed-rolled-back")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	tx, confirmed := w.prepare("confirmed-discarded")
	w.commit(tx)
	for i := 0; i < 4; i++ {
		w.broker.TriggerCheck()
	}
	for _, h := range []*txmsg.Half{handed, rolled, confirmed} {
		if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Discarded {
			t.Fatalf("half %+v, want discarded", hs)
		}
	}
	w.startResponder()
	w.startRelay()
	w.waitDeliveredOnce(handed.MsgID())
	if w.recovered() != 1 {
		t.Fatalf("%d halves recovered, want 1 (the handed row's)", w.recovered())
	}
	if w.delivered(rolled.MsgID()) != 0 {
		t.Fatal("the rolled-back transaction's message was delivered")
	}
	if st := w.status(confirmed.MsgID()); st != int(outbox.StatusPending) {
		t.Fatalf("the confirmed writer's row has status %d, want 0 (the relay's after Grace)", st)
	}
}

// Handed mode, the writer's END late: a check that comes between the commit and the END (a
// JVM paused, a slow network, a broker with a short transactionTimeOut) finds a handed row
// younger than EndGrace and answers UNKNOWN, so the late END alone commits the half and the
// message is stored once. Answering COMMIT there would make the broker store it twice.
func TestHandedRowWithinTheEndGraceWaitsForItsEnd(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.endGrace = time.Hour
	w.startRelay()
	w.startResponder()
	tx, h := w.prepareHanded("handed-late-end")
	w.commit(tx)
	w.broker.TriggerCheck() // before the writer's END
	testenv.Eventually(t, 5*time.Second, "an UNKNOWN answer within the grace", func() bool {
		return w.answers("unknown", txcheck.ReasonHandedYoung) == 1
	})
	if err := w.handedWriter().Finish(w.ctx, w.db.DB, h, nil); err != nil { // the late END lands
		t.Fatal(err)
	}
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Committed || hs.Commits != 1 || w.delivered(h.MsgID()) != 1 {
		t.Fatalf("half %+v, %d copies; want committed once, one copy", hs, w.delivered(h.MsgID()))
	}
	if st := w.status(h.MsgID()); st != int(outbox.StatusHanded) || w.answers("commit", txcheck.ReasonHanded) != 0 {
		t.Fatalf("row status %d, %d COMMIT answers; want the row handed and no COMMIT", st, w.answers("commit", txcheck.ReasonHanded))
	}
}
