// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// dbNowMs returns the database's clock, epoch ms.
func (w *world) dbNowMs() int64 {
	w.t.Helper()
	var ms int64
	if err := w.db.QueryRowContext(w.ctx, "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)").Scan(&ms); err != nil {
		w.t.Fatal(err)
	}
	return ms
}

// waitDB waits until d has passed by the database's clock since fromMs.
func (w *world) waitDB(fromMs int64, d time.Duration) {
	w.t.Helper()
	testenv.Eventually(w.t, d+5*time.Second, "the database clock to move on", func() bool {
		return w.dbNowMs() >= fromMs+d.Milliseconds()
	})
}

// A handed row whose transaction stayed open longer than the END grace: a check right
// after its commit is answered UNKNOWN (the grace counts from the commit, not the insert),
// so the writer's own END, a moment later, is the only COMMIT: one copy.
func TestHandedEndGraceCountsFromTheCommit(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.endGrace = 2 * time.Second
	w.startResponder()
	tx, h := w.prepareHanded("long-transaction")
	w.waitDB(w.dbNowMs(), 3*time.Second) // the business transaction runs on
	w.commit(tx)
	w.broker.TriggerCheck() // a check between the commit and the writer's END
	testenv.Eventually(t, 5*time.Second, "the check answered", func() bool { return w.handled() == 1 })
	if err := w.handedWriter().Finish(w.ctx, w.db.DB, h, nil); err != nil { // the END lands
		t.Fatal(err)
	}
	if hs := w.half(h.MsgID()); hs.Commits != 1 || w.delivered(h.MsgID()) != 1 {
		t.Fatalf("half %+v, %d copies; want one COMMIT, one copy", hs, w.delivered(h.MsgID()))
	}
	if n := w.answers("unknown", txcheck.ReasonHandedYoung); n != 1 {
		t.Fatalf("%d checks answered unknown/%s, want 1", n, txcheck.ReasonHandedYoung)
	}
}

// A handed row written by a session in another time zone (+08:00, its create_time eight
// hours ahead of UTC): its END grace is counted in the database's epoch clock, so a writer
// killed after the commit has its row committed by the first check at least the grace
// after the commit was seen, not eight hours later.
func TestHandedEndGraceIgnoresTheWriterTimeZone(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.endGrace = time.Second
	w.startResponder()
	conn, err := w.db.Conn(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(w.ctx, "SET time_zone = '+08:00'"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(w.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := w.handedWriter().Prepare(w.ctx, tx, &outbox.Message{Topic: topic, Body: []byte("tz"), Keys: []string{"order-tz"}})
	if err != nil || h.Relayed() {
		t.Fatalf("prepare: %v", err)
	}
	if _, err := tx.ExecContext(w.ctx, "UPDATE "+table+" SET status = 4 WHERE msg_id = ?", h.MsgID()); err != nil {
		t.Fatal(err)
	}
	w.commit(tx) // the writer dies: no END
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the first check answered", func() bool { return w.handled() == 1 })
	w.waitDB(w.dbNowMs(), 1500*time.Millisecond)
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the second check answered", func() bool { return w.handled() == 2 })
	if n := w.answers("commit", txcheck.ReasonHanded); n != 1 {
		t.Fatalf("%d COMMIT answers a grace after the commit, want 1", n)
	}
	testenv.Eventually(t, 5*time.Second, "the row marked sent", func() bool { return w.status(h.MsgID()) == int(outbox.StatusSent) })
	if n := w.delivered(h.MsgID()); n != 1 {
		t.Fatalf("%d copies, want 1", n)
	}
}

// A handed half discarded after its last check whose COMMIT lands late (its service
// answered that check after the discard): the broker stored it, so the relay's recovery
// asks the broker, finds the copy, and leaves the row handed; a discarded half never
// committed is still recovered and sent once. Before, both were sent: two copies.
func TestDiscardedHalfCommittedLateIsNotSentAgain(t *testing.T) {
	w := setup(t, rmqtest.Options{TransactionCheckMax: 2}, time.Hour)
	tx, late := w.prepareHanded("late-commit")
	w.commit(tx)
	tx, lost := w.prepareHanded("never-committed")
	w.commit(tx)
	for i := 0; i < 3; i++ {
		w.broker.TriggerCheck() // nobody registered: the checks are spent
	}
	for _, h := range []*txmsg.Half{late, lost} {
		if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Discarded {
			t.Fatalf("half %+v, want discarded", hs)
		}
	}
	if err := w.handedWriter().Finish(w.ctx, w.db.DB, late, nil); err != nil { // the late COMMIT
		t.Fatal(err)
	}
	if n := w.delivered(late.MsgID()); n != 1 {
		t.Fatalf("the late COMMIT stored %d copies, want 1", n)
	}
	w.startResponder()
	w.startRelay()
	w.waitDeliveredOnce(lost.MsgID()) // read after the late one: both were judged
	if n := w.delivered(late.MsgID()); n != 1 {
		t.Fatalf("the late-committed message reached the topic %d times, want once", n)
	}
	if st := w.status(late.MsgID()); st != int(outbox.StatusHanded) {
		t.Fatalf("late-committed row status %d, want 4 (left handed)", st)
	}
	if n := w.recovered(); n != 1 {
		t.Fatalf("%d halves recovered, want 1 (the one never committed)", n)
	}
}
