// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// randomText returns n bytes of base64 text that compresses poorly.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)[:n]
}

// userProperties drops RocketMQ's system properties (and our OUTBOX_MSG_ID).
func userProperties(m *primitive.MessageExt) map[string]string {
	out := map[string]string{}
	for k, v := range m.GetProperties() {
		switch k {
		case primitive.PropertyKeys, primitive.PropertyTags, primitive.PropertyUniqueClientMessageIdKeyIndex,
			primitive.PropertyMsgRegion, primitive.PropertyTraceSwitch, primitive.PropertyMinOffset, primitive.PropertyMaxOffset,
			primitive.PropertyWaitStoreMsgOk, primitive.PropertyDelayTimeLevel, primitive.PropertyRealTopic, primitive.PropertyRealQueueId,
			primitive.PropertyShardingKey, "CONSUME_START_TIME", "CLUSTER", "__BORNHOST", "BATCH", outbox.MsgIDProperty:
			continue
		}
		out[k] = v
	}
	return out
}

// TestDeliveredAsWritten: rows of every shape (tag or none, several keys, user properties,
// unicode, bodies under and over the client's 4 KiB compression threshold) arrive byte for
// byte with their tag, keys and properties, once each, whether the relay sends them one per
// request or in batches.
func TestDeliveredAsWritten(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch_send=%v", batch), func(t *testing.T) {
			each(t, false, func(t *testing.T, b *target) {
				e := newEnv(t, b)
				topic := b.topic(t, "written")
				want := map[string]outbox.Message{}
				var msgs []outbox.Message
				for i := range 300 {
					m := outbox.Message{
						MsgID: fmt.Sprintf("w-%04d", i), Topic: topic,
						Body: []byte(fmt.Sprintf(`{"orderSn":"SN%d","note":"订单 ✓ %d"}`, i, i)),
					}
					switch i % 5 {
					case 0:
						m.Tag = "created"
						m.Keys = []string{fmt.Sprintf("SN%d", i), fmt.Sprintf("U%d", i%7)}
					case 1:
						m.Properties = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tenant": "acme"}
						m.Tag = "paid"
					case 2:
						m.Body = []byte(randomText(10 << 10)) // compressed when sent alone
					case 3:
						m.Keys = []string{fmt.Sprintf("SN%d", i)}
					}
					msgs = append(msgs, m)
					want[m.MsgID] = m
				}
				e.insert(t, msgs...)
				in := b.consume(t, topic)
				e.startRelay(t, fmt.Sprintf("OUTBOX_RELAY_BATCH_SEND=%v", batch))
				testenv.Eventually(t, 90*time.Second, "every row sent", func() bool { return e.count(t, "status = 2") == len(msgs) })
				got := in.wait(t, len(msgs), 90*time.Second)
				for id, w := range want {
					m := got[id]
					if m == nil {
						t.Errorf("%s: not consumed", id)
						continue
					}
					if string(m.Body) != string(w.Body) {
						t.Errorf("%s: body %d bytes %.40q, want %d bytes %.40q", id, len(m.Body), m.Body, len(w.Body), w.Body)
					}
					if m.GetTags() != w.Tag {
						t.Errorf("%s: tag %q, want %q", id, m.GetTags(), w.Tag)
					}
					wantKeys := strings.Join(w.Keys, " ")
					if wantKeys == "" {
						wantKeys = w.MsgID
					}
					if m.GetKeys() != wantKeys {
						t.Errorf("%s: keys %q, want %q", id, m.GetKeys(), wantKeys)
					}
					wantProps := w.Properties
					if wantProps == nil {
						wantProps = map[string]string{}
					}
					if p := userProperties(m); !maps.Equal(p, wantProps) {
						t.Errorf("%s: properties %v, want %v", id, p, wantProps)
					}
				}
				if len(got) != len(msgs) {
					t.Errorf("consumed %d distinct messages, want %d", len(got), len(msgs))
				}
			})
		})
	}
}

// TestOrderedBySharding: on an ordered route, the messages of one sharding key all land in
// one queue, in the order of their rows, the keys of a queue sharing batch requests.
func TestOrderedBySharding(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "ordered")
		msgs := orderedRows("o", topic, 8, 25)
		in := b.consume(t, topic)
		relay := e.startRelay(t, `OUTBOX_ROUTES=[{"topic":"`+topic+`","ordered":true}]`)
		e.insertAfterFirst(t, msgs)
		checkKeysInQueueOrder(t, in.wait(t, len(msgs), 90*time.Second))
		// The keys of a queue shared batch requests, one row of each key a request.
		if n := sendRequests(t, relay); n >= len(msgs) {
			t.Errorf("%d send requests for %d rows: the keys of a queue did not share batches", n, len(msgs))
		}
	})
}

// insertAfterFirst inserts msgs[0], waits until the running relay has sent it, so that it
// knows the topic's queues (and the ordered keys of a queue share batch requests from then
// on), and inserts the rest.
func (e *env) insertAfterFirst(t *testing.T, msgs []outbox.Message) {
	t.Helper()
	e.insert(t, msgs[0])
	testenv.Eventually(t, 60*time.Second, "the first row sent", func() bool { return e.count(t, "status = 2") == 1 })
	e.insert(t, msgs[1:]...)
}

// orderedRows returns keys × per rows of topic, ids prefix-NNNN, the events of each key
// (order-K, also the message key) numbered {"seq":n} in row order.
func orderedRows(prefix, topic string, keys, per int) []outbox.Message {
	var msgs []outbox.Message
	for i := range keys * per {
		k := fmt.Sprintf("order-%d", i%keys)
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%04d", prefix, i), Topic: topic, ShardingKey: k, Keys: []string{k},
			Body: []byte(fmt.Sprintf(`{"seq":%d}`, i/keys))})
	}
	return msgs
}

// checkKeysInQueueOrder checks that the messages of each key (orderedRows) are in one queue,
// in row order.
func checkKeysInQueueOrder(t *testing.T, got map[string]*primitive.MessageExt) {
	t.Helper()
	byKey := map[string][]*primitive.MessageExt{}
	for _, m := range got {
		byKey[m.GetKeys()] = append(byKey[m.GetKeys()], m)
	}
	for k, ms := range byKey {
		slices.SortFunc(ms, func(a, b *primitive.MessageExt) int { return int(a.QueueOffset - b.QueueOffset) })
		for i, m := range ms {
			if m.Queue.QueueId != ms[0].Queue.QueueId {
				t.Errorf("%s: messages in queues %d and %d", k, ms[0].Queue.QueueId, m.Queue.QueueId)
				break
			}
			if want := fmt.Sprintf(`{"seq":%d}`, i); string(m.Body) != want {
				t.Errorf("%s: message %d in queue order is %s, want %s", k, i, m.Body, want)
				break
			}
		}
	}
}

// TestDelayLevel: a route's delay level reaches the broker. RocketMQ holds the message for
// the level's time (level 1: 1 s) before consumers see it; rmqtest records the level and
// delivers at once (a fidelity difference, internal/rmqtest/README.md).
func TestDelayLevel(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "delayed")
		var msgs []outbox.Message
		for i := range 5 {
			msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("d-%d", i), Topic: topic, Body: []byte("later")})
		}
		e.insert(t, msgs...)
		in := b.consume(t, topic)
		e.startRelay(t, `OUTBOX_ROUTES=[{"topic":"`+topic+`","delay_level":1}]`)
		for id, m := range in.wait(t, len(msgs), 90*time.Second) {
			if b.real {
				// Stored in SCHEDULE_TOPIC_XXXX first, then put into the topic after the delay.
				if held := m.StoreTimestamp - m.BornTimestamp; held < 900 {
					t.Errorf("%s: stored %d ms after it was sent, want the level's 1 s", id, held)
				}
				if m.GetProperty(primitive.PropertyRealTopic) != topic {
					t.Errorf("%s: REAL_TOPIC %q, want %q", id, m.GetProperty(primitive.PropertyRealTopic), topic)
				}
			} else if d := m.GetProperty(primitive.PropertyDelayTimeLevel); d != "1" {
				t.Errorf("%s: DELAY property %q, want 1", id, d)
			}
		}
	})
}

// TestIdempotentPushConsumer: the idempotency middleware on a real push consumer applies each
// order's event once, although the outbox holds two messages of the same event for some
// orders (a service that wrote it twice) and the relay is killed and restarted mid-stream.
func TestIdempotentPushConsumer(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "idem")
		const orders = 200
		var msgs []outbox.Message
		for i := range orders {
			sn := fmt.Sprintf("SN%05d", i)
			msgs = append(msgs, outbox.Message{Topic: topic, Tag: "created", Keys: []string{sn}, Body: []byte(sn)})
			if i%4 == 0 {
				msgs = append(msgs, outbox.Message{Topic: topic, Tag: "created", Keys: []string{sn}, Body: []byte(sn)})
			}
		}
		e.insert(t, msgs...)

		rdb, prefix := testenv.Redis(t)
		store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix + "idem:"})
		if err != nil {
			t.Fatal(err)
		}
		guard, err := idempotency.NewGuard(store, idempotency.Config{Group: "stock"})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		applied := map[string]int{}
		handled := 0
		mw, err := rocketmqmw.New(guard, rocketmqmw.Config{}, func(_ context.Context, m *primitive.MessageExt) error {
			if m.GetProperty(outbox.MsgIDProperty) == "" {
				return nil // the route probe of target.topic, not an order
			}
			mu.Lock()
			defer mu.Unlock()
			applied[m.GetKeys()]++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(mw.Close)
		b.pushConsumer(t, topic, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			res, err := mw.Consume(ctx, ms...)
			if res == consumer.ConsumeSuccess {
				mu.Lock()
				for _, m := range ms {
					if m.GetProperty(outbox.MsgIDProperty) != "" {
						handled++
					}
				}
				mu.Unlock()
			}
			return res, err
		})
		relay := []string{"OUTBOX_RELAY_BATCH_SIZE=20", "OUTBOX_RELAY_BATCH_SEND=false"}
		first := e.startRelay(t, relay...)
		testenv.Eventually(t, 60*time.Second, "some rows sent", func() bool { return e.count(t, "status = 2") >= 20 })
		first.Kill9(t)
		e.startRelay(t, relay...)
		testenv.Eventually(t, 90*time.Second, "every row sent", func() bool { return e.count(t, "status = 2") == len(msgs) })
		done := func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(applied) == orders && handled >= len(msgs)
		}
		for deadline := time.Now().Add(90 * time.Second); !done() && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
		}
		if !done() {
			mu.Lock()
			t.Fatalf("after 90s: %d of %d orders applied, %d of %d messages handled", len(applied), orders, handled, len(msgs))
		}
		mu.Lock()
		defer mu.Unlock()
		for i := range orders {
			if sn := fmt.Sprintf("SN%05d", i); applied[sn] != 1 {
				t.Errorf("%s applied %d times, want once", sn, applied[sn])
			}
		}
	})
}
