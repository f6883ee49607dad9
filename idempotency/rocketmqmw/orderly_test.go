// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/internal/idemtest"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// orderlyEvent is what the relay sends on an ordered route: the key as message key, sharding
// key (4.x queue choice) and __SHARDINGKEY (the 5.x message group).
func orderlyEvent(topic, sn, step string) *primitive.Message {
	m := primitive.NewMessage(topic, []byte(`{"orderSn":"`+sn+`","step":"`+step+`"}`))
	m.WithTag(step)
	m.WithKeys([]string{sn})
	m.WithShardingKey(sn)
	m.WithProperty("__SHARDINGKEY", sn)
	return m
}

// An orderly push consumer over a topic of four queues, fed the steps of six orders
// interleaved, with every event of two orders sent twice in a row (a producer that resent
// after a lost acknowledgement): each event is applied once, and each order's steps in the
// order sent.
func TestOrderlyConsumerAppliesEachEventOnceInOrderPerKey(t *testing.T) {
	srv, err := rmqtest.Start(rmqtest.Options{Queues: 4, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	b := broker{nameSrv: srv.NameServerAddr()}
	s := setupSQL(t)
	topic := "orders_" + testenv.RandomSuffix(6)

	steps := []string{"created", "paid", "shipped", "delivered"}
	var sns []string
	for i := range 6 {
		sns = append(sns, fmt.Sprintf("SN-%d", i))
	}
	var msgs []*primitive.Message
	for _, step := range steps {
		for i, sn := range sns {
			msgs = append(msgs, orderlyEvent(topic, sn, step))
			if i < 2 {
				msgs = append(msgs, orderlyEvent(topic, sn, step))
			}
		}
	}
	send(t, b.nameSrv, msgs...)

	var handled atomic.Int64
	mw, err := rocketmqmw.NewTx(s.Guard, s.DB, rocketmqmw.Config{Logger: testLogger(t)},
		func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
			handled.Add(1)
			return applyOrder(ctx, tx, orderSn(msg)+"/"+msg.GetTags())
		})
	if err != nil {
		t.Fatal(err)
	}
	var delivered atomic.Int64
	consume(t, b, "stock-fifo", topic, mw, &delivered, consumer.WithConsumerOrder(true), consumer.WithConsumerModel(consumer.Clustering))

	waitFor(t, "every message acknowledged", func() bool { return delivered.Load() == int64(len(msgs)) })
	events := len(sns) * len(steps)
	assertEachAppliedOnce(t, s.DB.DB, events)
	if handled.Load() != int64(events) {
		t.Fatalf("handler ran %d times, want %d (the %d resent events skipped)", handled.Load(), events, len(msgs)-events)
	}
	applied := idemtest.AppliedInOrder(t, s.DB.DB)
	for _, sn := range sns {
		var got []string
		for _, a := range applied {
			if k, step, _ := strings.Cut(a, "/"); k == sn {
				got = append(got, step)
			}
		}
		if !slices.Equal(got, steps) {
			t.Errorf("%s applied %v, want %v", sn, got, steps)
		}
	}
}

// An orderly instance stopped with Close and Shutdown unlocks its queues on the broker, so a
// new instance of the group takes them over at once: every message sent after the stop is
// consumed within waitFor's 30 s. Had the queues stayed locked, the new instance would wait
// for the broker's 60 s lock expiry (BenchmarkOrderlyRebalanceStall measures both cases).
func TestOrderlyShutdownHandsQueuesOver(t *testing.T) {
	srv, err := rmqtest.Start(rmqtest.Options{Queues: 4, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	b := broker{nameSrv: srv.NameServerAddr()}
	r := setupRedis(t)
	topic := "orders_" + testenv.RandomSuffix(6)
	const group = "stock-handover"
	g := r.Guard(t, idempotency.Config{Group: group})
	seen := &consumedSet{keys: map[string]bool{}, queues: map[int]bool{}}
	batch := func(round string) []string {
		var keys []string
		var msgs []*primitive.Message
		for i := range 32 {
			sn := fmt.Sprintf("%s-%02d", round, i)
			keys = append(keys, sn)
			msgs = append(msgs, orderlyEvent(topic, sn, "created"))
		}
		send(t, b.nameSrv, msgs...)
		return keys
	}
	newMW := func() *rocketmqmw.Middleware {
		mw, err := rocketmqmw.New(g, rocketmqmw.Config{Logger: testLogger(t)}, func(_ context.Context, msg *primitive.MessageExt) error {
			seen.add(orderSn(msg), msg.Queue.QueueId)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return mw
	}

	first := newMW()
	c, err := consumer.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameSrv})),
		consumer.WithInstance(clientName(t)),
		consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerOrder(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, first.Consume); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	warm := batch("warm")
	waitFor(t, "the first instance consumes every queue", func() bool { return seen.all(warm) })
	if n := seen.queueCount(); n < 2 {
		t.Fatalf("messages reached %d queue(s), want several", n)
	}
	first.Close()
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}

	consume(t, b, group, topic, newMW(), nil, consumer.WithConsumerOrder(true))
	after := batch("after")
	waitFor(t, "the second instance consumes what was sent after the first stopped", func() bool { return seen.all(after) })
}
