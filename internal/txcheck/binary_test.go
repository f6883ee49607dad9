// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
)

// A broker started with rocketmq.serialize.type=ROCKETMQ sends its check-backs with binary
// headers. Each is answered as its row says: a handed row committed by its transaction is
// committed on the broker and marked sent, a transaction that rolled back has its half
// rolled back, and a committed row whose writer died is rolled back and delivered by the
// relay; each message reaches the topic once or never.
func TestBinaryHeaderCheckBacksAnswered(t *testing.T) {
	w := setup(t, rmqtest.Options{BinaryHeaders: true}, time.Hour)
	w.startRelay()
	w.startResponder()
	txHanded, handed := w.prepareHanded("binary-handed")
	w.commit(txHanded)
	txGone, gone := w.prepare("binary-rolled-back")
	if err := txGone.Rollback(); err != nil {
		t.Fatal(err)
	}
	txKilled, killed := w.prepare("binary-killed")
	w.commit(txKilled) // ... and the writer dies: no Finish
	if n := w.broker.TriggerCheck(); n != 3 {
		t.Fatalf("%d checks sent, want 3", n)
	}
	testenv.Eventually(t, 5*time.Second, "the handed row marked sent after the COMMIT", func() bool {
		return w.answers("commit", txcheck.ReasonHanded) == 1 && w.status(handed.MsgID()) == 2
	})
	testenv.Eventually(t, 5*time.Second, "the rolled-back transaction's half rolled back", func() bool {
		return w.half(gone.MsgID()).Resolution == rmqtest.RolledBack
	})
	w.waitDeliveredOnce(killed.MsgID())
	if hs := w.half(handed.MsgID()); hs.Resolution != rmqtest.Committed || hs.Commits != 1 || w.delivered(handed.MsgID()) != 1 {
		t.Fatalf("handed half %+v, %d copies; want committed once, one copy", hs, w.delivered(handed.MsgID()))
	}
	if hs := w.half(killed.MsgID()); hs.Resolution != rmqtest.RolledBack || hs.Commits != 0 {
		t.Fatalf("half of the killed writer %+v, want rolled back and never committed", hs)
	}
	if w.delivered(gone.MsgID()) != 0 || w.answers("rollback", txcheck.ReasonRolledBack) != 1 || w.answers("rollback", txcheck.ReasonRelayDelivers) != 1 {
		t.Fatalf("rolled-back transaction delivered %d times; rollback answers %d no_row, %d relay_delivers; want 0, 1, 1",
			w.delivered(gone.MsgID()), w.answers("rollback", txcheck.ReasonRolledBack), w.answers("rollback", txcheck.ReasonRelayDelivers))
	}
}
