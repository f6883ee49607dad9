// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
)

// A consumer created with the client's namespace option is handed msg.Topic as
// "namespace%topic". The same event sent twice to the namespaced topic is applied once, and
// its identity is "namespace%topic:tag:key", which a consumer subscribed to the full name
// computes too.
func TestNamespacedConsumerAppliesADuplicateOnce(t *testing.T) {
	onEachBroker(t, func(t *testing.T, b broker) {
		r := setupRedis(t)
		const ns, group = "inst1", "stock-ns"
		topic := b.newTopic(t)
		// What a producer with the namespace option (the relay's rocketmq.namespace) sends.
		send(t, b.nameSrv, created(ns+"%"+topic, "SN-1", "SN-1", "SN-2")...)

		var handled atomic.Int64
		var topics atomic.Value
		mw, err := rocketmqmw.New(r.Guard(t, idempotency.Config{Group: group}), rocketmqmw.Config{Logger: testLogger(t)},
			func(ctx context.Context, msg *primitive.MessageExt) error {
				handled.Add(1)
				topics.Store(msg.Topic)
				return applyOrder(ctx, r.DB, orderSn(msg))
			})
		if err != nil {
			t.Fatal(err)
		}
		var delivered atomic.Int64
		// Orderly, so that the second SN-1 meets the first one applied, not in progress
		// (rmqtest redelivers a message sent back at once, not after 10 s as RocketMQ).
		consume(t, b, group, topic, mw, &delivered, consumer.WithNamespace(ns), consumer.WithConsumerOrder(true))

		waitFor(t, "three deliveries", func() bool { return delivered.Load() == 3 })
		assertEachAppliedOnce(t, r.DB.DB, 2)
		if handled.Load() != 2 {
			t.Fatalf("handler ran %d times, want 2 (the second SN-1 skipped)", handled.Load())
		}
		if got := topics.Load(); got != ns+"%"+topic {
			t.Errorf("the client handed msg.Topic %q, want %q", got, ns+"%"+topic)
		}
		for _, sn := range []string{"SN-1", "SN-2"} {
			if v := r.Value(t, group, ns+"%"+topic+":created:"+sn); v == "" {
				t.Errorf("no consumed record under %q", ns+"%"+topic+":created:"+sn)
			}
		}
	})
}

func TestTopicWithoutNamespace(t *testing.T) {
	for in, want := range map[string]string{"orders": "orders", "inst1%orders": "orders", "": ""} {
		if got := rocketmqmw.TopicWithoutNamespace(in); got != want {
			t.Errorf("TopicWithoutNamespace(%q) = %q, want %q", in, got, want)
		}
	}
	msg := func(topic string) *primitive.MessageExt {
		m := &primitive.MessageExt{Message: primitive.Message{Topic: topic}}
		m.WithTag("paid")
		return m
	}
	if a, b := rocketmqmw.TopicTagIdentityWithoutNamespace(msg("inst1%orders"), "SN-7"), rocketmqmw.TopicTagIdentity(msg("orders"), "SN-7"); a != b {
		t.Errorf("identity without namespace %q, plain %q: want equal", a, b)
	}
}

// Two tenants' namespaces hold two topics: events of the same topic, tag and key in each are
// two events, and one group consuming both applies both.
func TestIdentitiesOfTwoNamespacesDiffer(t *testing.T) {
	msg := func(topic string) *primitive.MessageExt {
		m := &primitive.MessageExt{Message: primitive.Message{Topic: topic}}
		m.WithTag("paid")
		return m
	}
	a, b := rocketmqmw.TopicTagIdentity(msg("tenantA%orders"), "SN-7"), rocketmqmw.TopicTagIdentity(msg("tenantB%orders"), "SN-7")
	if a == b {
		t.Fatalf("tenantA%%orders and tenantB%%orders share the identity %q: one tenant's event would be skipped", a)
	}
}
