// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestRetryCountAtIntLimitCostsOnlyItsRow: a failing row whose retry_count is at the INT
// limit (an adopted table that retries for ever) once made every write-back of its page fail
// with error 1264 and paused the whole table. The count is bounded where it is written: the
// row goes dead after its attempt, and the rows written after it are sent.
func TestRetryCountAtIntLimitCostsOnlyItsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	b.broker.SetTopicFaults("poison", rmqtest.Faults{ErrorRate: 1, ErrorCode: 25})
	b.insert(t, outbox.Message{MsgID: "at-limit", Topic: "poison", Body: []byte("p")})
	if _, err := b.db.Exec("UPDATE local_message SET retry_count = 2147483647, max_retry_count = 2147483647 WHERE msg_id = 'at-limit'"); err != nil {
		t.Fatal(err)
	}
	pub := &countingPublisher{Publisher: b.pub, counts: map[string]int{}}
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 30*time.Second, "the row at the limit attempted", func() bool { return pub.count("at-limit") > 0 })
	for i := 0; i < 20; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("later-%02d", i), Topic: "orders", Body: []byte("o")})
	}
	eventually(t, 30*time.Second, "the 20 later rows sent and the row at the limit dead", func() bool {
		return countWhere(t, b.db.DB, "topic = 'orders' AND status = 2") == 20 &&
			countWhere(t, b.db.DB, "msg_id = 'at-limit' AND status = 3 AND retry_count = 2147483647") == 1
	})
}

// TestRowRefusedByTriggerCostsOnlyItsRow: a trigger that refuses one row's write-back (error
// 1644) once failed the set-based UPDATE of its whole page, and the completer retried it for
// ever with publishing paused. The rows are written one at a time instead: the refused one
// goes dead with the database's refusal as reason, the others are sent.
func TestRowRefusedByTriggerCostsOnlyItsRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Exec(`CREATE TRIGGER refuse_one BEFORE UPDATE ON local_message FOR EACH ROW
		IF NEW.msg_id = 'refused' AND NEW.status = 2 THEN
			SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'this row may not be marked sent';
		END IF`); err != nil {
		t.Fatal(err)
	}
	msgs := []outbox.Message{{MsgID: "refused", Topic: "orders", Body: []byte("r")}}
	for i := 0; i < 20; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("n%02d", i), Topic: "orders", Body: []byte("n")})
	}
	b.insert(t, msgs...)
	run(t, b.newRelay(t, b.config()))
	eventually(t, 30*time.Second, "20 rows sent and the refused one dead", func() bool {
		return countWhere(t, b.db.DB, "msg_id <> 'refused' AND status = 2") == 20 &&
			countWhere(t, b.db.DB, "msg_id = 'refused' AND status = 3 AND fail_reason LIKE '%may not be marked sent%'") == 1
	})
	// Twenty rows written later go too: nothing is paused.
	for i := 0; i < 20; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("later-%02d", i), Topic: "orders", Body: []byte("o")})
	}
	eventually(t, 30*time.Second, "the 20 later rows sent", func() bool {
		return countWhere(t, b.db.DB, "msg_id LIKE 'later-%' AND status = 2") == 20
	})
}

// TestWriteBacksRefusedGiveTheLockUp: a leader whose every write-back is refused (a trigger
// here; a read-only server, a revoked grant in production) once kept its lock for ever, since
// a refusal counted as the database's progress, and /healthz stayed green. Refused writes now
// count on the stall clock: the leader reports itself stalled and gives the lock up, and a
// standby takes over.
func TestWriteBacksRefusedGiveTheLockUp(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.StallTimeout = 3 * time.Second
	first := b.newRelay(t, cfg)
	run(t, first)
	eventually(t, 30*time.Second, "the first relay leading", func() bool { return first.Health().Leader })
	second := b.newRelay(t, cfg)
	run(t, second)
	if _, err := b.db.Exec(`CREATE TRIGGER refuse_updates BEFORE UPDATE ON local_message FOR EACH ROW
		SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'updates refused by a trigger'`); err != nil {
		t.Fatal(err)
	}
	b.insert(t, outbox.Message{MsgID: "refused", Topic: "orders", Body: []byte("r")})
	stalled, took := false, false
	eventually(t, 30*time.Second, "the first relay stalled and the second leading", func() bool {
		h := first.Health()
		stalled = stalled || (h.Stalled && h.WritesRefused > 0)
		took = took || second.Health().Leader
		return stalled && took
	})
}
