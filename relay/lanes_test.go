// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// requestCounter counts the send requests it passes on to a rocketmq.Publisher, whose
// ordered queues it reports as its own.
type requestCounter struct {
	*rocketmq.Publisher
	requests atomic.Int64
}

func (p *requestCounter) Send(ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
	p.requests.Add(1)
	return p.Publisher.Send(ctx, route, msgs...)
}

// keyedRelay is a relay of b whose topic order-events is an ordered route (or not), sending
// through pub, and which has sent one row of that topic, so that the topic's queues are known.
func keyedRelay(t *testing.T, b *bundle, pub relay.Publisher, ordered bool) *relay.Relay {
	t.Helper()
	cfg := b.config()
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: ordered}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Router = router
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.insert(t, outbox.Message{MsgID: "first", Topic: "order-events", ShardingKey: "first", Body: []byte("0")})
	ctx := context.Background()
	if st, err := r.DrainOnce(ctx); err != nil || st.Sent != 1 {
		t.Fatalf("first row: %+v, %v", st, err)
	}
	return r
}

// keyedRows returns keys × per rows of order-events, interleaved as writers commit them, the
// events of key order-K numbered by their body in row order.
func keyedRows(keys, per int) []outbox.Message {
	var msgs []outbox.Message
	for i := 0; i < per; i++ {
		for k := 0; k < keys; k++ {
			msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("k%03d-%02d", k, i), Topic: "order-events",
				ShardingKey: fmt.Sprintf("order-%03d", k), Body: []byte(strconv.Itoa(i))})
		}
	}
	return msgs
}

// checkKeyOrder checks that each key's messages on the broker are in one queue, numbered
// 0, 1, 2, ... in queue order, skipping the numbers in missing[key], each once.
func checkKeyOrder(t *testing.T, broker *rmqtest.Server, missing map[string]int) {
	t.Helper()
	queueOf := map[string]int{}
	next := map[string]int{}
	for _, m := range broker.Messages("order-events") {
		key := m.Properties["SHARDING_KEY"]
		if key == "first" {
			continue
		}
		if q, ok := queueOf[key]; ok && q != m.QueueID {
			t.Fatalf("key %s on queues %d and %d", key, q, m.QueueID)
		}
		queueOf[key] = m.QueueID
		if skip, ok := missing[key]; ok && next[key] == skip {
			next[key]++
		}
		if n, _ := strconv.Atoi(string(m.Body)); n != next[key] {
			t.Fatalf("key %s: message %d where %d was due", key, n, next[key])
		}
		next[key]++
	}
}

// TestOrderedKeysOfAQueueShareBatchRequests: the rows of many sharding keys, a few each (an
// order service's events, each order its own key), go in batch requests that each carry the
// keys of one queue, on an ordered route and on an unordered one, and every key's rows still
// land in one queue in id order. One request per row, as before, cost 300 requests here.
func TestOrderedKeysOfAQueueShareBatchRequests(t *testing.T) {
	t.Parallel()
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			pub := &requestCounter{Publisher: b.pub}
			r := keyedRelay(t, b, pub, ordered)
			const keys, per = 100, 3
			b.insert(t, keyedRows(keys, per)...)
			pub.requests.Store(0)
			ctx := context.Background()
			st, err := r.DrainOnce(ctx)
			if err != nil || st.Sent != keys*per {
				t.Fatalf("one pass: %+v, %v; want %d sent", st, err, keys*per)
			}
			if n := pub.requests.Load(); n > keys*per/10 {
				t.Fatalf("%d send requests for %d rows of %d keys on 4 queues: the keys of a queue did not share batches", n, keys*per, keys)
			}
			// Unordered rows of a key are in its queue in id order too: one pass sends a
			// key's rows in one batch, in id order.
			checkKeyOrder(t, b.broker, nil)
		})
	}
}

// TestRefusedMessageInABatchOfOrderedKeys: the broker refuses a batch of ordered keys because
// one message is over its size limit; the batch is sent again one message at a time, the
// oversized message goes dead, and every other row is sent, each key in order.
func TestRefusedMessageInABatchOfOrderedKeys(t *testing.T) {
	t.Parallel()
	b := setupWith(t, rmqtest.Options{MaxMessageSize: 1000})
	r := keyedRelay(t, b, b.pub, true)
	msgs := keyedRows(10, 3)
	msgs[13].Body = []byte(strings.Repeat("x", 2000)) // key order-003, its second event
	b.insert(t, msgs...)
	ctx := context.Background()
	st, err := r.DrainOnce(ctx)
	if err != nil || st.Sent != 29 || st.Dead != 1 {
		t.Fatalf("one pass: %+v, %v; want 29 sent and 1 dead", st, err)
	}
	if n := countWhere(t, b.db.DB, "msg_id = 'k003-01' AND status = 3 AND fail_reason LIKE '%refused by the broker%'"); n != 1 {
		t.Fatalf("the oversized message is not dead with the broker's refusal (%s)", statusCounts(t, b.db.DB))
	}
	checkKeyOrder(t, b.broker, map[string]int{"order-003": 1})
}
