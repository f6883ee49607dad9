// SPDX-License-Identifier: Apache-2.0

package publishertest

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/relay"
)

// keyedBatches: a relay.KeyBatcher names each sharding key's queue, and a batch of keys it
// named alike is stored in that one queue, in the batch's order.
func (s *suite) keyedBatches(t *testing.T) {
	p := s.publisher(t)
	kb, ok := p.(relay.KeyBatcher)
	if !ok {
		t.Skipf("%T is not a relay.KeyBatcher", p)
	}
	topic := s.NewTopic(t)
	mustSend(t, p, relay.Route{}, message(topic, "warm", []byte("warm"))) // the topic's queues known
	groups := map[string][]string{}                                       // queue name -> keys
	for i := range 32 {
		key := fmt.Sprintf("key-%02d", i)
		name, ok := kb.QueueOf(topic, key)
		if !ok {
			t.Fatalf("QueueOf(%s, %s) unknown after a send to the topic", topic, key)
		}
		if again, _ := kb.QueueOf(topic, key); again != name {
			t.Fatalf("QueueOf(%s, %s) named %q, then %q", topic, key, name, again)
		}
		groups[name] = append(groups[name], key)
	}
	if len(groups) < 2 {
		t.Fatalf("QueueOf named one queue for 32 keys of a topic of several queues: %v", groups)
	}
	var batches [][]*relay.Message
	var all []*relay.Message
	for _, keys := range groups {
		batch := keyed(topic, keys, "batch")
		mustSend(t, p, relay.Route{}, batch...)
		alone := keyed(topic, keys[:1], "alone")
		mustSend(t, p, relay.Route{}, alone...)
		batches = append(batches, append(batch, alone...))
		all = append(all, batch...)
		all = append(all, alone...)
	}
	got := s.await(t, topic, all...)
	ids := byMsgID(got)
	queues := map[string]bool{}
	for _, b := range batches {
		q := expectInOrder(t, ids, b)
		if q != "" && queues[q] {
			t.Errorf("keys QueueOf named apart were stored in one queue %s", q)
		}
		queues[q] = true
	}
}

// keyed returns one message per key, in the keys' order.
func keyed(topic string, keys []string, name string) []*relay.Message {
	out := make([]*relay.Message, len(keys))
	for i, k := range keys {
		out[i] = message(topic, name+"-"+k, []byte(k))
		out[i].ShardingKey = k
	}
	return out
}

// expectInOrder checks that msgs are stored in one queue, in their order (the first copy
// of each counting), and returns the queue's name.
func expectInOrder(t *testing.T, ids map[string][]Stored, msgs []*relay.Message) string {
	t.Helper()
	queue, last := "", int64(-1)
	for i, m := range msgs {
		copies := ids[m.MsgID]
		if len(copies) == 0 {
			t.Errorf("%s (key %s): acknowledged but not stored", describe(m), m.ShardingKey)
			return ""
		}
		c := copies[0]
		switch {
		case i == 0:
			queue = c.Queue
		case c.Queue != queue:
			t.Errorf("%s (key %s) stored in queue %s, the messages before it in %s", describe(m), m.ShardingKey, c.Queue, queue)
			return ""
		case c.Offset < last:
			t.Errorf("%s (key %s) stored at offset %d of %s, before the message sent ahead of it (offset %d)", describe(m), m.ShardingKey, c.Offset, queue, last)
		}
		last = c.Offset
	}
	return queue
}

// orderedKeys: on an ordered route, the messages of one sharding key, each sent once the
// one before it was acknowledged (as the relay sends them), are stored in one queue in that
// order; another publisher (the next leader's) sends the key's next messages to that queue.
func (s *suite) orderedKeys(t *testing.T) {
	topic := s.NewOrderedTopic(t)
	route := relay.Route{Ordered: true}
	const keys, each = 8, 10
	chains := make([][]*relay.Message, keys)
	for k := range chains {
		for i := range each {
			m := message(topic, fmt.Sprintf("ordered-k%d-%02d", k, i), fmt.Appendf(nil, "%d", i))
			m.ShardingKey = fmt.Sprintf("order-%d", k)
			chains[k] = append(chains[k], m)
		}
	}
	acked := make([][]*relay.Message, keys)
	sendChains(t, s.publisher(t), route, chains, acked, 0, each-1)
	sendChains(t, s.publisher(t), route, chains, acked, each-1, each) // a new publisher: the next leader
	got := s.await(t, topic, slices.Concat(acked...)...)
	ids := byMsgID(got)
	for _, chain := range acked {
		expectInOrder(t, ids, chain)
	}
}

// sendChains sends the messages from..to-1 of every chain, the chains at once, each chain's
// one after the other, stopping a chain at its first failure; it appends the messages
// acknowledged to acked, chain by chain.
func sendChains(t *testing.T, p relay.Publisher, route relay.Route, chains, acked [][]*relay.Message, from, to int) {
	t.Helper()
	var wg sync.WaitGroup
	for k, chain := range chains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, m := range chain[from:to] {
				if err := send(p, route, m); err != nil {
					t.Errorf("send %s (key %s): %v (kind %s)", m.MsgID, m.ShardingKey, err, relay.KindOf(err))
					return
				}
				acked[k] = append(acked[k], m)
			}
		}()
	}
	wg.Wait()
}
