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

// pageIDs returns the ids of a page's rows when some key is blocked (holds needs them), else
// nil.
func (b blockedKeys) pageIDs(rows []outboxsql.Row) map[int64]bool {
	if len(b) == 0 {
		return nil
	}
	in := make(map[int64]bool, len(rows))
	for i := range rows {
		in[rows[i].ID] = true
	}
	return in
}

// holds reports whether the row id, of message msg on route, waits behind the head that an
// earlier page of this pass found holding its ordered key, a head not in this page (inPage):
// the row is held without asking the database again. It returns the key and its head.
func (b blockedKeys) holds(msg *Message, route Route, id int64, inPage map[int64]bool) (outboxsql.OrderKey, outboxsql.HeldHead, bool) {
	if !route.Ordered || msg.ShardingKey == "" {
		return outboxsql.OrderKey{}, outboxsql.HeldHead{}, false
	}
	k := outboxsql.OrderKey{Topic: msg.Topic, Key: msg.ShardingKey}
	h, ok := b[k]
	return k, h, ok && id > h.ID && !inPage[h.ID]
}

// plan groups the prepared items into units. An ordered key's rows may go only as the prefix
// of its unsent rows that is present in this batch: a row behind an earlier unsent row
// (failed and waiting, or not yet due) is held back, and the key noted in blocked.
// The units come in this order: single messages, lanes, batch requests.
func (r *Engine) plan(ctx context.Context, items []item, blocked blockedKeys) ([]unit, error) {
	g := r.group(items)
	heads, err := r.heldHeads(ctx, items, g)
	if err != nil {
		return nil, err
	}
	units := r.laneUnits(g.singles, items, g, heads, blocked)
	return r.batchUnits(units, items, g), nil
}

// batchKey is what the rows of one batch request share: producer group, topic and send
// timeout, and the keys' queue of a batch of keyed rows (KeyBatcher).
type batchKey struct {
	group, topic string
	timeout      time.Duration
	queue        string
}

// grouping is a page's items sorted by how they may go, each kind in the order first seen.
type grouping struct {
	chains     map[outboxsql.OrderKey][]int // the items of each ordered key
	chainOrder []outboxsql.OrderKey
	batches    map[batchKey][]int // the items that may share batch requests
	batchOrder []batchKey
	singles    []unit // the items that go one request each
}

// group sorts the items into the chains of ordered keys, the batches and the single
// messages.
func (r *Engine) group(items []item) grouping {
	g := grouping{chains: map[outboxsql.OrderKey][]int{}, batches: map[batchKey][]int{}}
	for i, it := range items {
		if it.msg == nil {
			continue
		}
		switch {
		case it.route.Ordered && it.msg.ShardingKey != "":
			k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
			if _, ok := g.chains[k]; !ok {
				g.chainOrder = append(g.chainOrder, k)
			}
			g.chains[k] = append(g.chains[k], i)
		case !r.cfg.DisableBatchSend && it.route.DelayLevel == 0:
			k, ok := r.batchOf(it)
			if !ok {
				g.singles = append(g.singles, unit{idx: []int{i}})
				continue
			}
			if _, ok := g.batches[k]; !ok {
				g.batchOrder = append(g.batchOrder, k)
			}
			g.batches[k] = append(g.batches[k], i)
		default:
			g.singles = append(g.singles, unit{idx: []int{i}})
		}
	}
	return g
}

// batchOf returns the batch requests an unordered item may share, or false when it goes on
// its own: a keyed row keeps its key's queue, sharing batches with the keys of that queue
// only, and goes alone when the publisher cannot tell it.
func (r *Engine) batchOf(it item) (batchKey, bool) {
	k := batchKey{group: it.route.Group, topic: it.msg.Topic, timeout: it.route.SendTimeout}
	if it.msg.ShardingKey != "" {
		q, ok := r.queueOf(it.msg)
		if !ok {
			return batchKey{}, false
		}
		k.queue = q
	}
	return k, true
}

// heldHeads sorts each ordered key's chain by id and reads which unsent row, if any, holds
// each key's rows of the page back (Store.OrderedHeads); a key absent goes whole.
func (r *Engine) heldHeads(ctx context.Context, items []item, g grouping) (map[outboxsql.OrderKey]outboxsql.HeldHead, error) {
	if len(g.chainOrder) == 0 {
		return nil, nil
	}
	streams := make(map[outboxsql.OrderKey][]int64, len(g.chainOrder))
	for _, k := range g.chainOrder {
		idx := g.chains[k]
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(items[a].row.ID, items[b].row.ID) })
		ids := make([]int64, len(idx))
		for n, i := range idx {
			ids[n] = items[i].row.ID
		}
		streams[k] = ids
	}
	return r.store.OrderedHeads(ctx, streams, r.ordered)
}

// laneUnits appends to units the lanes of the ordered keys: each key's sendable prefix
// (sendablePrefix), the keys of one queue together in one lane (laneOf), the others in a
// lane of their own. A key cut short by its head is noted in blocked.
func (r *Engine) laneUnits(units []unit, items []item, g grouping, heads map[outboxsql.OrderKey]outboxsql.HeldHead, blocked blockedKeys) []unit {
	lanes := map[laneKey]int{} // index in units of each queue's lane
	for _, k := range g.chainOrder {
		head, held := heads[k]
		ok, cut := sendablePrefix(items, g.chains[k], head, held)
		if cut && blocked != nil {
			blocked[k] = head
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
	return units
}

// sendablePrefix returns the items of one ordered key's chain (ascending ids) that may go:
// all of them when nothing holds the key (held false), else those below its head. cut says
// whether the head held any back: an earlier unsent row of the key is not in the page, and
// the rest wait for it.
func sendablePrefix(items []item, chain []int, head outboxsql.HeldHead, held bool) (ok []int, cut bool) {
	for _, i := range chain {
		if held && items[i].row.ID > head.ID {
			return ok, true
		}
		ok = append(ok, i)
	}
	return ok, false
}

// batchUnits appends to units the batch requests of each batch's items, each of at most
// MaxBatchMessages messages and MaxBatchBytes bytes of bodies (a body larger goes alone).
func (r *Engine) batchUnits(units []unit, items []item, g grouping) []unit {
	for _, k := range g.batchOrder {
		var cur []int
		size := 0
		for _, i := range g.batches[k] {
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
	return units
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
