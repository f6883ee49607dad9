// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
)

// item is one row of a page, prepared for publishing.
type item struct {
	row   *outboxsql.Row
	msg   *Message
	route Route
}

// unit is the work of one goroutine: a batch request, a single message, or a lane: the
// chains of ordered keys (one key's, or those of the keys of one queue), each key's rows
// published one after the other, several keys' in shared batch requests.
type unit struct {
	idx   []int
	batch bool
	lane  bool
}

// blockedKeys maps an ordered key, within one pass, to the first of its unsent rows that a
// page could not send (not in the page: failed and waiting, or not yet due). The later pages
// of the pass hold the key's rows after it without asking the database again: a key with a
// large backlog behind a waiting head would otherwise cost each page a read of that whole
// backlog's ids, a pass growing with the square of the backlog.
type blockedKeys map[outboxsql.OrderKey]outboxsql.HeldHead

// plan groups the prepared items into units. An ordered key's rows may go only as the prefix
// of its unsent rows that is present in this batch: a row behind an earlier unsent row
// (failed and waiting, or not yet due) is held back, and the key noted in blocked.
func (r *Engine) plan(ctx context.Context, items []item, blocked blockedKeys) ([]unit, error) {
	chains := map[outboxsql.OrderKey][]int{}
	var chainOrder []outboxsql.OrderKey
	type batchKey struct {
		group, topic string
		timeout      time.Duration
		queue        string // the keys' queue of a batch of keyed rows (KeyBatcher)
	}
	batches := map[batchKey][]int{}
	var batchOrder []batchKey
	var units []unit
	for i, it := range items {
		if it.msg == nil {
			continue
		}
		switch {
		case it.route.Ordered && it.msg.ShardingKey != "":
			k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
			if _, ok := chains[k]; !ok {
				chainOrder = append(chainOrder, k)
			}
			chains[k] = append(chains[k], i)
		case !r.cfg.DisableBatchSend && it.route.DelayLevel == 0:
			k := batchKey{it.route.Group, it.msg.Topic, it.route.SendTimeout, ""}
			if it.msg.ShardingKey != "" {
				// A keyed row keeps its key's queue: it shares batches with the keys of
				// that queue, or goes on its own.
				q, ok := r.queueOf(it.msg)
				if !ok {
					units = append(units, unit{idx: []int{i}})
					continue
				}
				k.queue = q
			}
			if _, ok := batches[k]; !ok {
				batchOrder = append(batchOrder, k)
			}
			batches[k] = append(batches[k], i)
		default:
			units = append(units, unit{idx: []int{i}})
		}
	}
	var heads map[outboxsql.OrderKey]outboxsql.HeldHead
	if len(chainOrder) > 0 {
		streams := make(map[outboxsql.OrderKey][]int64, len(chainOrder))
		for _, k := range chainOrder {
			idx := chains[k]
			slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(items[a].row.ID, items[b].row.ID) })
			ids := make([]int64, len(idx))
			for n, i := range idx {
				ids[n] = items[i].row.ID
			}
			streams[k] = ids
		}
		var err error
		if heads, err = r.store.OrderedHeads(ctx, streams, r.ordered); err != nil {
			return nil, err
		}
	}
	lanes := map[laneKey]int{} // index in units of each queue's lane
	for _, k := range chainOrder {
		idx := chains[k]
		head, held := heads[k]
		var ok []int
		for _, i := range idx {
			if held && items[i].row.ID > head.ID {
				// An earlier unsent row of this key is not in the batch: the rest wait for it.
				if blocked != nil {
					blocked[k] = head
				}
				break
			}
			ok = append(ok, i)
		}
		if len(ok) == 0 {
			continue
		}
		lk, shared := r.laneOf(items, ok)
		if !shared {
			units = append(units, unit{idx: ok, lane: true}) // a lane of its own
			continue
		}
		if n, found := lanes[lk]; found {
			units[n].idx = append(units[n].idx, ok...)
			continue
		}
		lanes[lk] = len(units)
		units = append(units, unit{idx: ok, lane: true})
	}
	for _, k := range batchOrder {
		idx := batches[k]
		var cur []int
		size := 0
		for _, i := range idx {
			n := len(items[i].msg.Body)
			if len(cur) > 0 && (len(cur) >= r.cfg.MaxBatchMessages || size+n > r.cfg.MaxBatchBytes) {
				units = append(units, unit{idx: cur, batch: len(cur) > 1})
				cur, size = nil, 0
			}
			cur = append(cur, i)
			size += n
		}
		if len(cur) > 0 {
			units = append(units, unit{idx: cur, batch: len(cur) > 1})
		}
	}
	return units, nil
}

// laneKey is one queue of one route's producer: the ordered keys whose rows go to it may
// share batch requests.
type laneKey struct {
	group, queue string
	timeout      time.Duration
}

// laneOf returns the lane of an ordered key's chain of rows, or false when its rows must go
// one request each: batches are off, the publisher cannot tell the key's queue, or a row has
// a delay level (RocketMQ batches carry none) or another producer than the first.
func (r *Engine) laneOf(items []item, chain []int) (laneKey, bool) {
	if r.cfg.DisableBatchSend {
		return laneKey{}, false
	}
	first := items[chain[0]]
	for _, i := range chain {
		rt := items[i].route
		if rt.DelayLevel != 0 || rt.Group != first.route.Group || rt.SendTimeout != first.route.SendTimeout {
			return laneKey{}, false
		}
	}
	q, ok := r.queueOf(first.msg)
	if !ok {
		return laneKey{}, false
	}
	return laneKey{group: first.route.Group, queue: first.msg.Topic + "\x00" + q, timeout: first.route.SendTimeout}, true
}

// queueOf names the queue of a keyed message when the publisher can batch keys by queue.
func (r *Engine) queueOf(m *Message) (string, bool) {
	if r.batcher == nil {
		return "", false
	}
	return r.batcher.QueueOf(m.Topic, m.ShardingKey)
}

// unorderedUnits plans a page whose ordered-key check could not run: its ordered rows are
// held, the rest go as usual.
func (r *Engine) unorderedUnits(items []item) []unit {
	units, _ := r.plan(context.Background(), slices.DeleteFunc(slices.Clone(items), func(it item) bool {
		return it.msg != nil && it.route.Ordered && it.msg.ShardingKey != ""
	}), nil)
	return units
}

// ordered reports whether messages of topic and tag go on an ordered route.
func (r *Engine) ordered(topic, tag string) bool {
	route, ok := r.cfg.Router.Route(topic, tag)
	return ok && route.Ordered
}
