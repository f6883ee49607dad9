// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/internal/idemtest"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// These tests run the real rocketmq-client-go push consumer against a broker given by its
// name server address, so that they can run on a real Apache RocketMQ as on rmqtest.

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// broker is what a consumer test needs from a RocketMQ: its name server, a way to create
// a topic, and a way to read what the broker moved to a group's dead-letter queue.
type broker struct {
	nameSrv string
	// newTopic returns a fresh topic, created on the broker.
	newTopic func(t *testing.T) string
	// dlq returns the messages in %DLQ%<group>; nil when the broker cannot be inspected.
	dlq func(group string) []rmqtest.Message
}

// brokers are the RocketMQs each consumer test runs on: the in-process rmqtest broker, with
// one queue per topic so that order across messages is the queue's order. A real Apache
// broker is one more entry: its name server address, a topic creator and (optionally) a
// DLQ reader.
var brokers = map[string]func(t *testing.T) broker{
	"rmqtest": startRmqtest,
}

func startRmqtest(t *testing.T) broker {
	t.Helper()
	srv, err := rmqtest.Start(rmqtest.Options{Queues: 1, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return broker{
		nameSrv:  srv.NameServerAddr(),
		newTopic: func(*testing.T) string { return "orders_" + testenv.RandomSuffix(6) }, // created on first use
		dlq:      func(group string) []rmqtest.Message { return srv.Messages("%DLQ%" + group) },
	}
}

// onEachBroker runs test on every broker of brokers, as parallel subtests.
func onEachBroker(t *testing.T, test func(t *testing.T, b broker)) {
	for name, start := range brokers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, start(t))
		})
	}
}

var clientSeq atomic.Int64

// clientName is unique per client: the library shares connections by client id.
func clientName(t testing.TB) string {
	return fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "_"), os.Getpid(), clientSeq.Add(1))
}

// send publishes msgs in order to one queue chosen by their sharding key.
func send(t testing.TB, nameSrv string, msgs ...*primitive.Message) {
	t.Helper()
	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
		producer.WithInstanceName(clientName(t)),
		producer.WithGroupName("test-producer"),
		producer.WithQueueSelector(producer.NewHashQueueSelector()),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown() }()
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.SendSync(ctx, m)
		cancel()
		if err != nil {
			t.Fatalf("send %s: %v", m.GetKeys(), err)
		}
	}
}

// event is a message of topic with tag, keyed by the order number sn.
func event(topic, tag, sn string) *primitive.Message {
	m := primitive.NewMessage(topic, []byte(`{"orderSn":"`+sn+`"}`))
	m.WithTag(tag)
	m.WithKeys([]string{sn})
	m.WithShardingKey("one-queue")
	return m
}

// created is one "created" event per order number, in order.
func created(topic string, sns ...string) []*primitive.Message {
	var msgs []*primitive.Message
	for _, sn := range sns {
		msgs = append(msgs, event(topic, "created", sn))
	}
	return msgs
}

// consume runs a push consumer of group on topic with mw, shut down (after mw.Close) at
// the end of the test. acked, when not nil, counts the messages acknowledged.
func consume(t *testing.T, b broker, group, topic string, mw *rocketmqmw.Middleware, acked *atomic.Int64, opts ...consumer.Option) {
	t.Helper()
	all := append([]consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameSrv})),
		consumer.WithInstance(clientName(t)),
		consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, opts...)
	c, err := consumer.NewPushConsumer(all...)
	if err != nil {
		t.Fatal(err)
	}
	fn := func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		res, err := mw.Consume(ctx, msgs...)
		if res == consumer.ConsumeSuccess && acked != nil {
			acked.Add(int64(len(msgs)))
		}
		return res, err
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, fn); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mw.Close()
		_ = c.Shutdown()
	})
}

// calls records the order numbers a handler was called for, in order.
type calls struct {
	mu  sync.Mutex
	sns []string
}

func (c *calls) add(sn string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sns = append(c.sns, sn)
	return countOf(c.sns, sn)
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.sns)
}

func countOf(sns []string, sn string) int {
	n := 0
	for _, s := range sns {
		if s == sn {
			n++
		}
	}
	return n
}

func orderSn(msg *primitive.MessageExt) string { return strings.Fields(msg.GetKeys())[0] }

// An orderly consumer whose handler fails once on SN2: the queue is suspended and SN2
// retried in place, so every message is applied once and in the order sent. (With
// ConsumeRetryLater the client would commit past SN2 and lose it.)
func TestOrderlyHandlerFailingOnceKeepsOrder(t *testing.T) {
	onEachBroker(t, func(t *testing.T, b broker) {
		s := setupSQL(t)
		topic := b.newTopic(t)
		want := []string{"SN1", "SN2", "SN3", "SN4", "SN5"}
		send(t, b.nameSrv, created(topic, want...)...)

		seen := &calls{}
		mw, err := rocketmqmw.NewTx(s.Guard, s.DB, rocketmqmw.Config{Logger: testLogger(t), OrderlySuspend: 50 * time.Millisecond},
			func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
				sn := orderSn(msg)
				if seen.add(sn) == 1 && sn == "SN2" {
					return errors.New("warehouse unavailable")
				}
				return applyOrder(ctx, tx, sn)
			})
		if err != nil {
			t.Fatal(err)
		}
		consume(t, b, "stock-orderly", topic, mw, nil, consumer.WithConsumerOrder(true))

		waitFor(t, "every order applied", func() bool { return len(idemtest.AppliedInOrder(t, s.DB.DB)) == len(want) })
		if got := idemtest.AppliedInOrder(t, s.DB.DB); !slices.Equal(got, want) {
			t.Fatalf("applied in order %v, want %v", got, want)
		}
		assertEachAppliedOnce(t, s.DB.DB, len(want))
		if got, wantCalls := seen.get(), []string{"SN1", "SN2", "SN2", "SN3", "SN4", "SN5"}; !slices.Equal(got, wantCalls) {
			t.Fatalf("handler calls %v, want %v (SN2 retried in place before SN3)", got, wantCalls)
		}
	})
}

// A handler that panics on one message: the panic is recovered and logged naming the
// message, the claim is released, the message is retried up to the group's maximum
// reconsume times and then lies in %DLQ%<group>; every other message is applied once.
func TestPanickingHandlerEndsInDLQ(t *testing.T) {
	onEachBroker(t, func(t *testing.T, b broker) {
		r := setupRedis(t)
		g := r.Guard(t, idempotency.Config{Group: "stock-panic"})
		topic := b.newTopic(t)
		const orders, maxReconsume = 20, 2
		var sns []string
		for i := range orders {
			sns = append(sns, fmt.Sprintf("SN%02d", i))
		}
		send(t, b.nameSrv, created(topic, append(sns, "SN-POISON")...)...)

		var logs testenv.SyncBuffer
		seen := &calls{}
		mw, err := rocketmqmw.New(g, rocketmqmw.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))},
			func(ctx context.Context, msg *primitive.MessageExt) error {
				sn := orderSn(msg)
				seen.add(sn)
				if sn == "SN-POISON" {
					panic("nil map in the stock service")
				}
				return applyOrder(ctx, r.DB, sn)
			})
		if err != nil {
			t.Fatal(err)
		}
		consume(t, b, "stock-panic", topic, mw, nil, consumer.WithMaxReconsumeTimes(maxReconsume))

		if b.dlq != nil {
			waitFor(t, "the poison message in the DLQ", func() bool { return len(b.dlq("stock-panic")) == 1 })
			if dead := b.dlq("stock-panic")[0]; !slices.Equal(dead.Keys, []string{"SN-POISON"}) {
				t.Fatalf("DLQ holds keys %v, want SN-POISON", dead.Keys)
			}
		}
		waitFor(t, "the poison message handled 1 + max reconsume times", func() bool {
			return countOf(seen.get(), "SN-POISON") == 1+maxReconsume
		})
		waitFor(t, "the other orders applied", func() bool { return len(idemtest.AppliedInOrder(t, r.DB.DB)) == orders })
		assertEachAppliedOnce(t, r.DB.DB, orders)
		if attempts := countOf(seen.get(), "SN-POISON"); attempts != 1+maxReconsume {
			t.Fatalf("poison message handled %d times, want %d (first delivery + %d reconsumes)", attempts, 1+maxReconsume, maxReconsume)
		}
		if v := r.Value(t, "stock-panic", topic+":created:SN-POISON"); v != "" {
			t.Fatalf("claim of the poison message left as %q, want released", v)
		}
		if !strings.Contains(logs.String(), "handler panicked") || !strings.Contains(logs.String(), `"keys":"SN-POISON"`) {
			t.Fatalf("no log line naming the panicking message: %s", logs.String())
		}
	})
}

// Two events of one order (created, then paid) and a redelivery of paid: two effects.
// The order number alone would have merged paid into created.
func TestTwoEventsOfOneOrderAndARedelivery(t *testing.T) {
	onEachBroker(t, func(t *testing.T, b broker) {
		s := setupSQL(t)
		topic := b.newTopic(t)
		send(t, b.nameSrv, event(topic, "created", "SN-7001"), event(topic, "paid", "SN-7001"), event(topic, "paid", "SN-7001"))

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
		consume(t, b, "stock-events", topic, mw, &delivered)

		waitFor(t, "three deliveries", func() bool { return delivered.Load() == 3 })
		// A concurrent consumer: the two events may be applied in either order.
		if got := idemtest.AppliedInOrder(t, s.DB.DB); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"SN-7001/created", "SN-7001/paid"}) {
			t.Fatalf("effects %v, want created and paid once each", got)
		}
		assertEachAppliedOnce(t, s.DB.DB, 2)
		if handled.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2 (the redelivered paid skipped)", handled.Load())
		}
	})
}

// An orderly consumer whose handler always panics on SN3: the queue is suspended and SN3
// retried in place until the consumer's maximum reconsume times, then the client moves it
// to %DLQ%<group> and the later messages follow, in order, each applied once.
func TestOrderlyPoisonMessageEndsInDLQ(t *testing.T) {
	onEachBroker(t, func(t *testing.T, b broker) {
		s := setupSQL(t)
		topic := b.newTopic(t)
		const maxReconsume = 2
		send(t, b.nameSrv, created(topic, "SN1", "SN2", "SN3", "SN4", "SN5")...)

		seen := &calls{}
		mw, err := rocketmqmw.NewTx(s.Guard, s.DB, rocketmqmw.Config{Logger: testLogger(t), OrderlySuspend: 20 * time.Millisecond},
			func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
				sn := orderSn(msg)
				seen.add(sn)
				if sn == "SN3" {
					panic("bad stock row")
				}
				return applyOrder(ctx, tx, sn)
			})
		if err != nil {
			t.Fatal(err)
		}
		consume(t, b, "stock-orderly-poison", topic, mw, nil, consumer.WithConsumerOrder(true), consumer.WithMaxReconsumeTimes(maxReconsume))

		want := []string{"SN1", "SN2", "SN4", "SN5"}
		waitFor(t, "the others applied", func() bool { return len(idemtest.AppliedInOrder(t, s.DB.DB)) == len(want) })
		if got := idemtest.AppliedInOrder(t, s.DB.DB); !slices.Equal(got, want) {
			t.Fatalf("applied in order %v, want %v", got, want)
		}
		assertEachAppliedOnce(t, s.DB.DB, len(want))
		if b.dlq != nil {
			waitFor(t, "SN3 in the DLQ", func() bool { return len(b.dlq("stock-orderly-poison")) == 1 })
			if dead := b.dlq("stock-orderly-poison")[0]; !slices.Equal(dead.Keys, []string{"SN3"}) {
				t.Fatalf("DLQ holds keys %v, want SN3", dead.Keys)
			}
		}
		// The client tries once, then again while its local reconsume count is within the
		// maximum, and gives up when it exceeds it: 1 + maxReconsume + 1 calls.
		if n := countOf(seen.get(), "SN3"); n != maxReconsume+2 {
			t.Fatalf("SN3 handled %d times, want %d", n, maxReconsume+2)
		}
		if i, j := slices.Index(seen.get(), "SN3"), slices.Index(seen.get(), "SN4"); j < i+maxReconsume+2 {
			t.Fatalf("SN4 handled before SN3 was given up: calls %v", seen.get())
		}
	})
}
