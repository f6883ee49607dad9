// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// BenchmarkOrderlyRebalanceStall measures how long an orderly push-consumer group of two
// instances, each behind the middleware, stops consuming queues that change hands:
//
//   - join-s: instance A holds every queue; B starts. A gives up half of them but the
//     client never unlocks them (its removeUnnecessaryMessageQueue leaves orderly queues
//     locked), so B cannot lock them until the broker's lock expires (60 s after A's last
//     renewal, renewed every 20 s) and B's next rebalance (every 20 s) tries again.
//   - shutdown-s: B is stopped with Shutdown, which unlocks its queues and unregisters; A
//     is told at once and locks them.
//
// Each figure is the time from the change until every message sent right after it (64
// keys over the topic's queues) has been consumed. It runs on rmqtest and, when
// OUTBOX_TEST_ROCKETMQ_NAMESRV is set, on that Apache RocketMQ. It takes about a minute
// per broker, so it is not part of make test:
//
//	go test -run '^$' -bench OrderlyRebalanceStall -benchtime 1x ./idempotency/rocketmqmw
func BenchmarkOrderlyRebalanceStall(b *testing.B) {
	b.Run("rmqtest", func(b *testing.B) {
		srv, err := rmqtest.Start(rmqtest.Options{Queues: 4, Logf: func(string, ...any) {}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(srv.Close)
		for range b.N {
			measureRebalanceStall(b, srv.NameServerAddr(), "orders_"+testenv.RandomSuffix(6))
		}
	})
	if addr := os.Getenv("OUTBOX_TEST_ROCKETMQ_NAMESRV"); addr != "" {
		b.Run("apache", func(b *testing.B) {
			for range b.N {
				measureRebalanceStall(b, addr, createTopic(b, addr, testenv.RocketMQBroker()))
			}
		})
	}
}

// consumedSet records the keys consumed and the queues they came from.
type consumedSet struct {
	mu     sync.Mutex
	keys   map[string]bool
	queues map[int]bool
}

func (c *consumedSet) add(key string, queue int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.keys[key], c.queues[queue] = true, true
}

func (c *consumedSet) all(keys []string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range keys {
		if !c.keys[k] {
			return false
		}
	}
	return true
}

func (c *consumedSet) queueCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queues)
}

// createTopic creates a topic of four queues on an Apache broker (whose topics are not created
// on first use) and waits until it has a route.
func createTopic(b *testing.B, nameSrv, brokerAddr string) string {
	topic := "orders_" + testenv.RandomSuffix(6)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{nameSrv})))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(brokerAddr),
		admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
		b.Fatalf("create topic %s: %v", topic, err)
	}
	p, err := producer.NewDefaultProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
		producer.WithInstanceName(clientName(b)), producer.WithGroupName("probe"), producer.WithRetry(0))
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown() }()
	testenv.Eventually(b, 30*time.Second, "a route to "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("probe")))
		return err == nil
	})
	return topic
}

func measureRebalanceStall(b *testing.B, nameSrv, topic string) {
	b.Helper()
	r := setupRedis(b)
	const group = "stock-rebalance"
	g := r.Guard(b, idempotency.Config{Group: group + topic})
	seen := &consumedSet{keys: map[string]bool{}, queues: map[int]bool{}}
	batch := func(round string) []string {
		var keys []string
		var msgs []*primitive.Message
		for i := range 64 {
			sn := fmt.Sprintf("%s-%02d", round, i)
			keys = append(keys, sn)
			msgs = append(msgs, orderlyEvent(topic, sn, "created"))
		}
		send(b, nameSrv, msgs...)
		return keys
	}
	start := func() interface{ Shutdown() error } {
		mw, err := rocketmqmw.New(g, rocketmqmw.Config{Logger: testLogger(b)}, func(_ context.Context, msg *primitive.MessageExt) error {
			seen.add(orderSn(msg), msg.Queue.QueueId)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		c, err := consumer.NewPushConsumer(
			consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
			consumer.WithInstance(fmt.Sprintf("rebalance-%d-%d", os.Getpid(), clientSeq.Add(1))),
			consumer.WithGroupName(group+topic),
			consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
			consumer.WithConsumerOrder(true),
		)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Subscribe(topic, consumer.MessageSelector{}, mw.Consume); err != nil {
			b.Fatal(err)
		}
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { mw.Close(); _ = c.Shutdown() })
		return c
	}
	// wait returns how long after since every one of keys was consumed.
	wait := func(what string, since time.Time, keys []string) time.Duration {
		testenv.Eventually(b, 3*time.Minute, what, func() bool { return seen.all(keys) })
		return time.Since(since)
	}

	start() // A
	wait("instance A consumes the warm-up", time.Now(), batch("warm"))
	if n := seen.queueCount(); n < 2 {
		b.Fatalf("warm-up reached %d queue(s); the measure needs several", n)
	}
	t0 := time.Now()
	instB := start()
	join := wait("every message sent after B joined consumed", t0, batch("join"))
	t1 := time.Now()
	if err := instB.Shutdown(); err != nil {
		b.Fatal(err)
	}
	shutCall := time.Since(t1)
	shut := wait("every message sent after B's Shutdown consumed", t1, batch("shutdown"))
	b.ReportMetric(join.Seconds(), "join-s")
	b.ReportMetric(shut.Seconds(), "shutdown-s")
	b.Logf("%s: %d queues; stall after B joined %.1f s, after B's Shutdown %.1f s (the call itself %.1f s)",
		nameSrv, seen.queueCount(), join.Seconds(), shut.Seconds(), shutCall.Seconds())
}
