// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// txSecret signs the halves of the tests' writers (txmsg, the Java recipe); txSecretEnv
// gives it to the relay.
const (
	txSecret    = "brokersuite-half-secret-0123"
	txSecretEnv = "OUTBOX_ROCKETMQ_TRANSACTION_CHECK_SECRETS=" + txSecret
)

// checkBudget covers a broker with RocketMQ's default check timing (a half is checked 6 s
// after its send, at the next 30 s check round), as the shared test broker may run;
// scripts/rocketmq.sh starts brokers with 1 s for both.
const checkBudget = 90 * time.Second

// TestTransactionalWriterAndCheckBacks runs the half-message path end to end with the relay
// binary answering check-backs (rocketmq.transaction_check_groups): a committed and ended
// message is consumed once, at once; a message whose writer died between its commit and its
// END is settled by the relay's check answer (ROLLBACK, row pulled forward) and consumed
// once, sent by the relay; a rolled-back one is never consumed; one whose transaction is
// held open across a check is answered UNKNOWN (the row's lock is held), and once committed
// (its writer gone) settled by the next check and consumed once. On Apache RocketMQ this
// shows the broker accepts our END_TRANSACTION, registers the relay's check group by
// heartbeat and sends it the checks.
func TestTransactionalWriterAndCheckBacks(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		topic := b.topic(t, "TxOrders")
		e := newEnv(t, b)
		group := "outbox_tx_" + testenv.RandomSuffix(8)
		in := b.consume(t, topic)
		relay := e.startRelay(t, "OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS="+group, txSecretEnv, "OUTBOX_LOG_LEVEL=debug")
		p, err := rocketmq.NewProducer(
			producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
			producer.WithGroupName("txw_"+testenv.RandomSuffix(8)),
			producer.WithInstanceName("txw-"+testenv.RandomSuffix(8)),
			producer.WithRetry(0),
		)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown()
		tp, err := txmsg.New(txmsg.Config{Writer: e.writer, Sender: p, NameServers: []string{b.nameServer},
			CheckGroup: group, Secret: txSecret, Grace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*checkBudget)
		defer cancel()
		prepare := func(body string) (*sql.Tx, *txmsg.Half) {
			t.Helper()
			return prepareHalf(ctx, t, e, tp, topic, body)
		}
		// The relay's responder registers with the brokers when it starts; wait for its log line.
		testenv.Eventually(t, 30*time.Second, "the relay answering check-backs", func() bool {
			return strings.Contains(relay.Out.String(), "answering transactional check-backs")
		})

		open, held := prepare("held-open")
		tx, rolled := prepare("rolled-back")
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		tx, killed := prepare("writer-killed")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		tx, ended := prepare("ended")
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := tp.Finish(ctx, e.db.DB, ended, nil); err != nil {
			t.Fatalf("Finish: %v (the broker refused our END_TRANSACTION?)", err)
		}
		if n := e.count(t, "msg_id = ? AND status = 2", ended.MsgID()); n != 1 {
			t.Fatal("the ended message's row is not marked sent")
		}
		in.wait(t, 1, 30*time.Second)
		if in.copies(ended.MsgID()) != 1 {
			t.Fatalf("first message consumed is not the ended one: killed %d, rolled back %d", in.copies(killed.MsgID()), in.copies(rolled.MsgID()))
		}
		testenv.Eventually(t, checkBudget, "a check of the open transaction answered UNKNOWN", func() bool {
			return answered(relay.Out.String(), held.MsgID(), "open_transaction")
		})
		if in.copies(held.MsgID()) != 0 {
			t.Fatal("the open transaction's message was consumed")
		}
		if err := open.Commit(); err != nil { // ... and its writer dies before Finish
			t.Fatal(err)
		}
		in.wait(t, 3, checkBudget)
		// A consumer may receive a message before the relay has written its row back, and
		// the responder logs its answer after it made the row due: each is polled for, never
		// read at the moment the message arrives.
		settled := func(what string, cond func() bool) {
			t.Helper()
			for deadline := time.Now().Add(checkBudget); !cond(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("timed out after %s waiting for %s\n%s", checkBudget, what, tail(relay.Out.String(), 3000))
				}
			}
		}
		settled("the killed writer's row marked sent", func() bool {
			return e.count(t, "msg_id = ? AND status = 2", killed.MsgID()) == 1
		})
		settled("the killed writer's message settled by a check", func() bool {
			return answered(relay.Out.String(), killed.MsgID(), "relay_delivers")
		})
		settled("the held transaction's message settled by a check", func() bool {
			return answered(relay.Out.String(), held.MsgID(), "relay_delivers")
		})
		settled("the held transaction's row marked sent", func() bool {
			return e.count(t, "msg_id = ? AND status = 2", held.MsgID()) == 1
		})
		if in.copies(ended.MsgID()) != 1 || in.copies(killed.MsgID()) != 1 || in.copies(held.MsgID()) != 1 || in.copies(rolled.MsgID()) != 0 {
			t.Fatalf("copies consumed: ended %d, killed %d, held open %d, rolled back %d; want 1, 1, 1, 0",
				in.copies(ended.MsgID()), in.copies(killed.MsgID()), in.copies(held.MsgID()), in.copies(rolled.MsgID()))
		}
	})
}

// answered reports whether the relay's log has a check answer for msgID with reason.
func answered(log, msgID, reason string) bool {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"msg_id":"`+msgID+`"`) && strings.Contains(line, `"reason":"`+reason+`"`) {
			return true
		}
	}
	return false
}

// prepareHalf begins a transaction on e's database and prepares a message of body (its key
// too) on topic with tp: the row inserted and the half sent, which the test requires.
func prepareHalf(ctx context.Context, t *testing.T, e *env, tp *txmsg.Producer, topic, body string) (*sql.Tx, *txmsg.Half) {
	t.Helper()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := tp.Prepare(ctx, tx, &outbox.Message{Topic: topic, Tag: "tx", Keys: []string{body}, Body: []byte(body)})
	if err != nil {
		t.Fatal(err)
	}
	if h.Relayed() {
		t.Fatalf("%s: the half was not sent", body)
	}
	return tx, h
}
