// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

func routeOf(topic string, perBroker map[string]int) []*primitive.MessageQueue {
	var out []*primitive.MessageQueue
	for _, b := range []string{"broker-a", "broker-b"} {
		for id := range perBroker[b] {
			out = append(out, &primitive.MessageQueue{Topic: topic, BrokerName: b, QueueId: id})
		}
	}
	return out
}

// TestOrderedKeysKeepTheirQueueWhileABrokerLeavesTheRoute: a key's queue is the same before,
// during and after its broker's absence from the route, and it waits meanwhile; an operator
// adding queues moves keys, and says so in the log.
func TestOrderedKeysKeepTheirQueueWhileABrokerLeavesTheRoute(t *testing.T) {
	var logs strings.Builder
	c := newQueueChooser(zerolog.New(&logs))
	both := routeOf("T", map[string]int{"broker-a": 4, "broker-b": 4})
	home := map[string]string{}
	for k := range 64 {
		key := fmt.Sprintf("key%d", k)
		mq := c.Select(primitive.NewMessage("T", nil).WithShardingKey(key), both, "")
		home[key] = mq.String()
	}
	// broker-b leaves the route (as after a name server's expiry of a dead broker).
	c.Select(primitive.NewMessage("T", nil), routeOf("T", map[string]int{"broker-a": 4}), "")
	waited := 0
	for key, want := range home {
		mq, wait := c.pick("T", key, true)
		switch {
		case wait != nil:
			waited++
			if !strings.Contains(want, "broker-b") || wait.broker != "broker-b" {
				t.Fatalf("key %s (queue %s) waits for %s", key, want, wait.broker)
			}
		case mq.String() != want:
			t.Fatalf("key %s moved from %s to %s while broker-b was out of the route", key, want, mq)
		}
	}
	if waited == 0 || !strings.Contains(logs.String(), "ordered messages of this queue wait for its broker") {
		t.Fatalf("%d keys waited; logs: %s", waited, logs.String())
	}
	// broker-b is back: every key in its queue again, and the stable choice is the client's
	// hash selector's for a one-broker topic.
	c.Select(primitive.NewMessage("T", nil), both, "")
	for key, want := range home {
		if mq, wait := c.pick("T", key, true); wait != nil || mq.String() != want {
			t.Fatalf("key %s after the return: %v %v, want %s", key, mq, wait, want)
		}
	}
	one := newQueueChooser(zerolog.Nop())
	h := fnv.New32a()
	h.Write([]byte("key7"))
	if mq := one.Select(primitive.NewMessage("U", nil).WithShardingKey("key7"), routeOf("U", map[string]int{"broker-a": 4}), ""); mq.QueueId != int(h.Sum32()%4) {
		t.Fatalf("one-broker topic: key7 on queue %d, the client's hash selector says %d", mq.QueueId, h.Sum32()%4)
	}
	// An operator adds queues: the set changes, and the log says keys move.
	c.Select(primitive.NewMessage("T", nil), routeOf("T", map[string]int{"broker-a": 8, "broker-b": 4}), "")
	if !strings.Contains(logs.String(), "the topic's queues changed") {
		t.Fatalf("no log line for the new queues: %s", logs.String())
	}
}

// TestKeyedBatchOfKeysOnSeveralQueuesIsRefused: a batch of keyed messages that the relay
// grouped while their keys shared a queue is refused without a send once the topic's queues
// changed under it (an operator adding queues moves keys), so that the relay sends them one
// at a time, each to its own key's queue, instead of all to the first key's.
func TestKeyedBatchOfKeysOnSeveralQueuesIsRefused(t *testing.T) {
	p, err := NewPublisher(Config{NameServers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	p.queues.Select(primitive.NewMessage("T", nil), routeOf("T", map[string]int{"broker-a": 1}), "")
	a, okA := p.QueueOf("T", "key-a")
	b, okB := p.QueueOf("T", "key-b")
	if !okA || !okB || a != b {
		t.Fatalf("on one queue: key-a on %q (%v), key-b on %q (%v), want one queue", a, okA, b, okB)
	}
	// The operator gives the topic 8 queues: the keys now hash apart.
	p.queues.Select(primitive.NewMessage("T", nil), routeOf("T", map[string]int{"broker-a": 8}), "")
	a, _ = p.QueueOf("T", "key-a")
	other := ""
	for n := 0; other == ""; n++ {
		if q, _ := p.QueueOf("T", fmt.Sprintf("key-%d", n)); q != a {
			other = fmt.Sprintf("key-%d", n)
		}
	}
	err = p.Send(context.Background(), message.Route{Ordered: true},
		&message.Message{MsgID: "1", Topic: "T", ShardingKey: "key-a", Body: []byte("a")},
		&message.Message{MsgID: "2", Topic: "T", ShardingKey: other, Body: []byte("b")})
	if !errors.Is(err, errKeysOnSeveralQueues) || message.KindOf(err) != message.SendRefused {
		t.Fatalf("Send = %v (kind %v), want errKeysOnSeveralQueues, refused", err, message.KindOf(err))
	}
}
