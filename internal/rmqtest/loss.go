// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// A broker that acknowledges messages and then loses them, as RocketMQ does with its
// defaults (ASYNC_FLUSH, ASYNC_MASTER) when a machine crashes or a master fails over to a
// replica that had not caught up:
//
//   - TruncateQueue drops a queue's tail: the messages at and after an offset are gone,
//     and the next send reuses their offsets;
//   - DropQueueHead drops a queue's head, as retention (or a lost commit log file) does: the
//     queue's first offset moves up;
//   - Snapshot and Failover replace the whole store with an older copy under the same broker
//     name and address: what was acknowledged after the snapshot is gone, and the commit log
//     offsets after it are handed out again to new messages.
//
// Nothing else changes: consumer offsets, registrations and the route stay as they were.

// Snapshot is a copy of a broker's store at one moment, for Failover.
type Snapshot struct {
	topics   map[string][]queueCopy
	nextPhys int64
}

type queueCopy struct {
	recs []*record
	base int64
}

// Snapshot copies the broker's store (records are never changed once stored, so they are
// shared, not copied).
func (s *Server) Snapshot() *Snapshot {
	st := s.store
	st.mu.Lock()
	defer st.mu.Unlock()
	snap := &Snapshot{topics: map[string][]queueCopy{}, nextPhys: st.nextPhys}
	for name, t := range st.topics {
		qs := make([]queueCopy, len(t.queues))
		for i, q := range t.queues {
			qs[i] = queueCopy{recs: append([]*record(nil), q.recs...), base: q.base}
		}
		snap.topics[name] = qs
	}
	return snap
}

// Failover stands for a master replaced by a replica holding snap: the broker stops (its
// connections drop), its store becomes snap's copy, and it starts again on the same address
// under the same name. Messages stored after snap are lost although they were acknowledged;
// topics created after snap are gone too.
func (s *Server) Failover(snap *Snapshot) error {
	if snap == nil {
		return errors.New("rmqtest: Failover without a snapshot")
	}
	s.StopBroker()
	s.store.restore(snap)
	return s.StartBroker()
}

// TruncateQueue drops the messages of a topic's queue at offsets from keep on, as a broker
// that lost its unflushed tail does; the queue's next message gets offset keep. It returns
// how many were dropped.
func (s *Server) TruncateQueue(topic string, queueID int, keep int64) (int, error) {
	return s.store.cut(topic, queueID, func(q *queue) int {
		n := int(max(0, q.base+int64(len(q.recs))-max(keep, q.base)))
		q.recs = q.recs[:len(q.recs)-n]
		return n
	})
}

// DropQueueHead drops the messages of a topic's queue below offset first, as retention does:
// the queue's first offset becomes first (never lower than it was). It returns how many
// were dropped.
func (s *Server) DropQueueHead(topic string, queueID int, first int64) (int, error) {
	return s.store.cut(topic, queueID, func(q *queue) int {
		n := int(min(max(0, first-q.base), int64(len(q.recs))))
		q.recs = append([]*record(nil), q.recs[n:]...)
		q.base += int64(n)
		return n
	})
}

// cut applies drop to a queue and forgets the records it removed.
func (st *store) cut(topic string, queueID int, drop func(*queue) int) (int, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	t := st.topics[topic]
	if t == nil || queueID < 0 || queueID >= len(t.queues) {
		return 0, fmt.Errorf("rmqtest: no queue %d of topic %s", queueID, topic)
	}
	q := t.queues[queueID]
	n := drop(q)
	st.reindexLocked()
	return n, nil
}

// restore replaces the store's content with snap's, waking everything waiting on it.
func (st *store) restore(snap *Snapshot) {
	st.mu.Lock()
	defer st.mu.Unlock()
	old := st.topics
	st.topics = map[string]*topicData{}
	for name, qs := range snap.topics {
		t := &topicData{queues: make([]*queue, len(qs))}
		for i, qc := range qs {
			t.queues[i] = &queue{recs: append([]*record(nil), qc.recs...), base: qc.base, signal: make(chan struct{})}
		}
		st.topics[name] = t
	}
	for _, t := range old {
		for _, q := range t.queues {
			close(q.signal)
		}
	}
	st.nextPhys = snap.nextPhys
	st.reindexLocked()
}

// reindexLocked rebuilds the commit log index and the store order from the queues.
func (st *store) reindexLocked() {
	st.byPhys = map[int64]*record{}
	for _, t := range st.topics {
		for _, q := range t.queues {
			for _, r := range q.recs {
				st.byPhys[r.physOffset] = r
			}
		}
	}
	// The store order is the commit log order.
	keys := slices.Sorted(maps.Keys(st.byPhys))
	order := make([]*record, len(keys))
	for i, k := range keys {
		order[i] = st.byPhys[k]
	}
	st.order = order
	close(st.changed)
	st.changed = make(chan struct{})
}

// minOffset is a queue's first offset.
func (st *store) minOffset(topic string, queueID int) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.topics[topic]; t != nil && queueID >= 0 && queueID < len(t.queues) {
		return t.queues[queueID].base
	}
	return 0
}

// earliest is the store time of a queue's first message, -1 when it holds none (RocketMQ's
// answer to GET_EARLIEST_MSG_STORETIME for an empty queue).
func (st *store) earliest(topic string, queueID int) int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	if t := st.topics[topic]; t != nil && queueID >= 0 && queueID < len(t.queues) && len(t.queues[queueID].recs) > 0 {
		return t.queues[queueID].recs[0].storeTimestamp
	}
	return -1
}

// earliestStoreTime answers GET_EARLIEST_MSG_STORETIME.
func (b *broker) earliestStoreTime(c *conn, req *command) {
	q, _ := strconv.Atoi(req.Ext["queueId"])
	resp := newResponse(req, resSuccess, "")
	resp.Ext["timestamp"] = strconv.FormatInt(b.s.store.earliest(req.Ext["topic"], q), 10)
	c.reply(req, resp)
}

// viewMessage answers VIEW_MESSAGE_BY_ID: the message stored at a commit log offset, or
// RocketMQ's SYSTEM_ERROR when there is none.
func (b *broker) viewMessage(c *conn, req *command) {
	off, err := strconv.ParseInt(req.Ext["offset"], 10, 64)
	r := b.s.store.lookup(off)
	if err != nil || r == nil {
		c.reply(req, newResponse(req, resSystemError, "can not find message by the offset, "+req.Ext["offset"]))
		return
	}
	resp := newResponse(req, resSuccess, "")
	resp.Body = r.wire
	c.reply(req, resp)
}
