// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
)

// orderlyCtx is the context rocketmq-client-go gives an orderly consumer's callback.
func orderlyCtx() (context.Context, *primitive.ConsumeOrderlyContext) {
	oc := primitive.NewConsumeOrderlyContext()
	return primitive.WithOrderlyCtx(context.Background(), oc), oc
}

// In orderly mode a batch stops at the first message to redeliver: the later ones are not
// handled (they would overtake it), and the queue is suspended for OrderlySuspend.
func TestOrderlyBatchStopsAtFirstFailure(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	boom := errors.New("warehouse unavailable")
	rec := &recorder{db: b.DB, fail: map[string]error{"SN2": boom}}
	consume, err := wrap(t, g, rocketmqmw.Config{Logger: testLogger(t), OrderlySuspend: 250 * time.Millisecond}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	batch := []*primitive.MessageExt{newMsg("m1", "", "SN1"), newMsg("m2", "", "SN2"), newMsg("m3", "", "SN3")}
	ctx, oc := orderlyCtx()
	res, err := consume(ctx, batch...)
	if res != consumer.SuspendCurrentQueueAMoment || !errors.Is(err, boom) {
		t.Fatalf("orderly batch with a failure: %v, %v; want SuspendCurrentQueueAMoment with the error", res, err)
	}
	if oc.SuspendCurrentQueueTimeMillis != 250 {
		t.Fatalf("suspend %d ms, want 250", oc.SuspendCurrentQueueTimeMillis)
	}
	if got := strings.Join(rec.calls, ","); got != "SN1,SN2" {
		t.Fatalf("handler calls %s, want SN1,SN2 (SN3 must wait for SN2)", got)
	}
	delete(rec.fail, "SN2")
	rec.calls = nil
	ctx, _ = orderlyCtx()
	if res, err := consume(ctx, batch...); res != consumer.ConsumeSuccess || err != nil {
		t.Fatalf("retried batch: %v, %v", res, err)
	}
	if got := strings.Join(rec.calls, ","); got != "SN2,SN3" {
		t.Fatalf("retry called the handler for %s, want SN2,SN3", got)
	}
	assertEachAppliedOnce(t, b.DB.DB, 3)
}

// Close cancels a running handler's context (the client's is context.Background()) and
// later deliveries are sent back without calling the handler.
func TestCloseCancelsHandlers(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	started := make(chan struct{})
	var calls atomic.Int64
	mw, err := rocketmqmw.New(g, rocketmqmw.Config{Logger: testLogger(t)}, func(ctx context.Context, msg *primitive.MessageExt) error {
		if calls.Add(1) == 1 {
			close(started)
		}
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res consumer.ConsumeResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := mw.Consume(context.Background(), newMsg("m1", "", "SN1"))
		done <- result{res, err}
	}()
	<-started
	mw.Close()
	mw.Close() // twice is fine
	r := <-done
	if r.res != consumer.ConsumeRetryLater || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("handler running at Close: %v, %v; want RetryLater with context.Canceled", r.res, r.err)
	}
	if v := b.Value(t, "stock", "venue_topic::SN1"); v != "" {
		t.Fatalf("claim left as %q after the cancelled handler, want released", v)
	}
	if res, err := mw.Consume(context.Background(), newMsg("m2", "", "SN2")); res != consumer.ConsumeRetryLater || err == nil {
		t.Fatalf("delivery after Close: %v, %v; want RetryLater", res, err)
	}
	if calls.Load() != 1 {
		t.Fatalf("handler called %d times, want once (not after Close)", calls.Load())
	}
}

// In broadcasting mode every instance applies every message (identities are scoped by
// instance), and a failure is retried in place, since the client would drop it.
func TestBroadcastingRetriesInPlacePerInstance(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{Group: "cache-evict"})
	if _, err := rocketmqmw.New(g, rocketmqmw.Config{Broadcasting: true}, func(context.Context, *primitive.MessageExt) error { return nil }); err == nil || !strings.Contains(err.Error(), "Instance") {
		t.Fatalf("broadcasting without Instance: %v, want an error naming Instance", err)
	}
	var applied []string
	failures := 2
	for _, instance := range []string{"pod-a", "pod-b"} {
		mw, err := rocketmqmw.New(g, rocketmqmw.Config{Logger: testLogger(t), Broadcasting: true, Instance: instance, BroadcastRetry: time.Millisecond},
			func(ctx context.Context, msg *primitive.MessageExt) error {
				if failures > 0 {
					failures--
					return errors.New("cache node restarting")
				}
				applied = append(applied, instance)
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(mw.Close)
		for range 2 { // a delivery and a redelivery to each instance
			if res, err := mw.Consume(context.Background(), newMsg("m1", "", "SN1")); res != consumer.ConsumeSuccess || err != nil {
				t.Fatalf("%s: %v, %v; want success after retrying in place", instance, res, err)
			}
		}
	}
	if !slices.Equal(applied, []string{"pod-a", "pod-b"}) {
		t.Fatalf("applied on %v, want once on each instance", applied)
	}
}

func TestTopicTagIdentity(t *testing.T) {
	t.Parallel()
	msg := func(topic, tag string) *primitive.MessageExt {
		m := newMsg("id", "")
		m.Topic = topic
		m.WithTag(tag)
		return m
	}
	ids := map[string]bool{}
	for _, c := range []struct {
		msg  *primitive.MessageExt
		key  string
		want string
	}{
		{msg("orders", "created"), "SN-7001", "orders:created:SN-7001"},
		{msg("orders", "paid"), "SN-7001", "orders:paid:SN-7001"},
		{msg("orders", ""), "SN-7001", "orders::SN-7001"},
		// A ':' in the tag cannot make two events one: tag "a:b" key "c" vs tag "a" key "b:c".
		{msg("orders", "a:b"), "c", `orders:a\:b:c`},
		{msg("orders", "a"), "b:c", "orders:a:b:c"},
		{msg("orders", `a\`), "c", `orders:a\\:c`},
	} {
		got := rocketmqmw.TopicTagIdentity(c.msg, c.key)
		if got != c.want {
			t.Errorf("TopicTagIdentity(%s, %q, %q) = %q, want %q", c.msg.Topic, c.msg.GetTags(), c.key, got, c.want)
		}
		if ids[got] {
			t.Errorf("identity %q given to two events", got)
		}
		ids[got] = true
	}
	if got := rocketmqmw.KeyIdentity(msg("orders", "paid"), "SN-7001"); got != "SN-7001" {
		t.Errorf("KeyIdentity = %q", got)
	}
}
