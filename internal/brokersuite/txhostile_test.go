// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// startProducer starts a producer of a group and instance of its own (prefix and a random
// suffix) without retries, shut down when the test ends.
func startProducer(t *testing.T, b *target, prefix string) rocketmq.Producer {
	t.Helper()
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
		producer.WithGroupName(prefix+"_"+testenv.RandomSuffix(8)), producer.WithInstanceName(prefix+"-"+testenv.RandomSuffix(8)),
		producer.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// The lookup the relay makes before it sends the row of a discarded half
// (remoting.Conn.Stored, QUERY_MESSAGE by unique key): a stored message is found by its
// UNIQ_KEY in its topic, an unknown key and another topic are not.
func TestStoredFindsAMessageByItsUniqueKey(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		topic := b.topic(t, "TxStored")
		p := startProducer(t, b, "stored")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("stored")))
		if err != nil {
			t.Fatal(err)
		}
		c, err := remoting.Dial(ctx, b.brokerAddr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		stored := func(topic, key string) bool {
			ok, err := c.Stored(ctx, topic, key)
			if err != nil {
				t.Fatal(err)
			}
			return ok
		}
		testenv.Eventually(t, 10*time.Second, "the message found by its unique key", func() bool { return stored(topic, res.MsgID) })
		if stored(topic, "00000000000000000000000000000000") || stored("TxStoredOther", res.MsgID) {
			t.Fatal("an unknown key, or the key in another topic, was found")
		}
	})
}

// A half any producer sends with the relay's check group and a victim's msg_id, unsigned:
// the broker checks it with the relay, which answers UNKNOWN (unauthenticated) and leaves
// the victim's DeliverAt row, an hour out, alone.
func TestForgedHalfCheckedByTheBrokerTouchesNoRow(t *testing.T) {
	t.Parallel() // mostly waiting on the broker's check schedule; its group and topic are its own
	each(t, false, func(t *testing.T, b *target) {
		topic := b.topic(t, "TxForged")
		e := newEnv(t, b)
		group := "outbox_tx_" + testenv.RandomSuffix(8)
		relay := e.startRelay(t, "OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS="+group, txSecretEnv, "OUTBOX_LOG_LEVEL=debug")
		victim := outbox.Message{MsgID: "victim-" + testenv.RandomSuffix(8), Topic: topic, Body: []byte("later"), DeliverAt: time.Now().Add(time.Hour)}
		e.insert(t, victim)
		var due int64
		if err := e.db.QueryRow("SELECT next_retry_time FROM local_message WHERE msg_id = ?", victim.MsgID).Scan(&due); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 30*time.Second, "the relay answering check-backs", func() bool {
			return strings.Contains(relay.Out.String(), "answering transactional check-backs")
		})
		p := startProducer(t, b, "attacker")
		m := primitive.NewMessage(topic, []byte("forged"))
		m.WithProperty(primitive.PropertyTransactionPrepared, "true")
		m.WithProperty(primitive.PropertyProducerGroup, group)
		m.WithProperty(outbox.MsgIDProperty, victim.MsgID)
		m.WithProperty(outbox.WriterProperty, "c")
		m.WithKeys([]string{victim.MsgID})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := p.SendSync(ctx, m); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, checkBudget, "the forged half's check answered", func() bool {
			return strings.Contains(relay.Out.String(), `"msg_id":"`+victim.MsgID+`"`)
		})
		var now int64
		if err := e.db.QueryRow("SELECT next_retry_time FROM local_message WHERE msg_id = ?", victim.MsgID).Scan(&now); err != nil {
			t.Fatal(err)
		}
		if now != due || !answered(relay.Out.String(), victim.MsgID, "unauthenticated") {
			t.Fatalf("the victim's row: next_retry_time %d, was %d; the check's answer:\n%s", now, due, tail(relay.Out.String(), 2000))
		}
	})
}

// Two handed rows committed by a writer that died before its END, every relay down, the
// broker discards both halves after its last check; then the first half's COMMIT lands
// late (its service answered the last check after the discard): Apache RocketMQ stores it.
// The relay, back, asks the broker before it sends a discarded half's row: the late-committed
// one is left handed (consumed once), the other is recovered and consumed once. Without the
// lookup the relay sent the late-committed row again: two copies.
func TestDiscardedHalfCommittedLateOnTheBroker(t *testing.T) {
	t.Parallel() // mostly waiting on the broker's check schedule; its group and topic are its own
	each(t, false, func(t *testing.T, b *target) {
		if !b.real {
			t.Skip("rmqtest: TestDiscardedHalfCommittedLateIsNotSentAgain in internal/txcheck")
		}
		topic := b.topic(t, "TxLateCommit")
		e := newEnv(t, b)
		group := "outbox_tx_" + testenv.RandomSuffix(8)
		in := b.consume(t, topic)
		p := startProducer(t, b, "txw")
		tp, err := txmsg.New(txmsg.Config{Writer: e.writer, Sender: handedSender{p}, NameServers: []string{b.nameServer},
			CheckGroup: group, Secret: txSecret, Grace: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer tp.Close()
		window := checkWindow(t, b.brokerAddr)
		ctx, cancel := context.WithTimeout(context.Background(), window+5*time.Minute)
		defer cancel()
		var halves []*txmsg.Half
		for _, body := range []string{"late-commit", "never-committed"} {
			tx, h := prepareHalf(ctx, t, e, tp, topic, body)
			if _, err := tx.ExecContext(ctx, "UPDATE local_message SET status = 4 WHERE msg_id = ?", h.MsgID()); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil { // ... and the writer dies: no END
				t.Fatal(err)
			}
			halves = append(halves, h)
		}
		late, lost := halves[0], halves[1]
		for _, h := range halves {
			testenv.Eventually(t, window, "the broker to discard the half after its last check", func() bool {
				return discarded(t, b.brokerAddr, h.MsgID())
			})
		}
		if err := tp.Finish(ctx, e.db.DB, late, nil); err != nil { // the late COMMIT
			t.Fatalf("the late COMMIT of a discarded half: %v", err)
		}
		in.wait(t, 1, 30*time.Second)
		relay := e.startRelay(t, "OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS="+group, txSecretEnv, "OUTBOX_LOG_LEVEL=debug")
		in.wait(t, 2, 3*time.Minute) // the other row, recovered after the settle time
		logged := func(what string) bool {
			for _, line := range strings.Split(relay.Out.String(), "\n") {
				if strings.Contains(line, `"msg_id":"`+late.MsgID()+`"`) && strings.Contains(line, what) {
					return true
				}
			}
			return false
		}
		testenv.Eventually(t, time.Minute, "the late-committed half judged", func() bool {
			return logged("committed after all") || logged("the relay sends the row")
		})
		if logged("the relay sends the row") {
			t.Fatalf("the relay recovered the late-committed half's row: a second copy\n%s", tail(relay.Out.String(), 3000))
		}
		if in.copies(late.MsgID()) != 1 || in.copies(lost.MsgID()) != 1 {
			t.Fatalf("copies consumed: late-committed %d, never committed %d; want 1 and 1\n%s",
				in.copies(late.MsgID()), in.copies(lost.MsgID()), tail(relay.Out.String(), 3000))
		}
		if n := e.count(t, "msg_id = ? AND status = 4", late.MsgID()); n != 1 {
			t.Fatal("the late-committed row is no longer handed")
		}
	})
}
