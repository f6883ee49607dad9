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
)

// The lookup the relay makes before it sends the row of a discarded half
// (remoting.Conn.Stored, QUERY_MESSAGE by unique key): a stored message is found by its
// UNIQ_KEY in its topic, an unknown key and another topic are not.
func TestStoredFindsAMessageByItsUniqueKey(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		topic := b.topic(t, "TxStored")
		p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
			producer.WithGroupName("stored_"+testenv.RandomSuffix(8)), producer.WithInstanceName("stored-"+testenv.RandomSuffix(8)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown()
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
		p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
			producer.WithGroupName("attacker_"+testenv.RandomSuffix(8)), producer.WithInstanceName("attacker-"+testenv.RandomSuffix(8)),
			producer.WithRetry(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown()
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
