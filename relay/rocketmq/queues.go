// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"
)

// brokerProbeInterval is how often a broker that failed is tried again while it is down:
// one message (or one ordered key's row) at a time. Short, because a probe that fails costs
// an unordered message only a send to another broker, and ordered keys wait for it.
const brokerProbeInterval = time.Second

// strikeWindow is how close two sends without an answer must be to mark their broker down.
const strikeWindow = 3 * time.Second

// queueRef is one queue of a topic: a broker's name and a queue id on it.
type queueRef struct {
	broker string
	id     int
}

// topicQueues is what the publisher knows of a topic's queues.
type topicQueues struct {
	// all is every queue the topic was seen with, sorted: the space ordered keys hash over.
	// A broker that drops out of the route (down, read-only) keeps its queues here, so that
	// no key moves to another queue behind the back of its older messages.
	all []queueRef
	// current is the number of write queues per broker in the latest route.
	current map[string]int
	seen    []*primitive.MessageQueue // the route's queue list current was made from
	next    uint32                    // round robin over the usable queues
}

// downBroker is a broker whose last send failed for a reason of its own.
type downBroker struct {
	since   time.Time
	probeAt time.Time // when one message may try it again
	err     string
	waits   map[queueRef]bool // ordered queues whose waiting keys were logged
}

// queueChooser chooses the queue of every send, as the producer's QueueSelector and before
// a send: ordered keys by a hash over the topic's remembered queues (never moving while a
// broker is down), everything else round robin over the queues of brokers that are not down.
type queueChooser struct {
	log zerolog.Logger

	mu     sync.Mutex
	topics map[string]*topicQueues
	down   map[string]*downBroker // by broker name
	addrs  map[string]string      // broker address -> name, learnt from sends
	// strikes is, per broker not down, when a send last got no answer.
	strikes map[string]time.Time
}

func newQueueChooser(log zerolog.Logger) *queueChooser {
	return &queueChooser{log: log, topics: map[string]*topicQueues{}, down: map[string]*downBroker{},
		addrs: map[string]string{}, strikes: map[string]time.Time{}}
}

// Select implements producer.QueueSelector: the client calls it with the route's write
// queues. A queue chosen before the send (Message.Queue) is kept.
func (c *queueChooser) Select(msg *primitive.Message, mqs []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	c.mu.Lock()
	defer c.mu.Unlock()
	tq := c.learn(msg.Topic, mqs)
	if msg.Queue != nil {
		return msg.Queue
	}
	if key := msg.GetShardingKey(); key != "" {
		return tq.mq(msg.Topic, tq.stable(key))
	}
	q, _ := c.roundRobin(tq, "")
	return tq.mq(msg.Topic, q)
}

// learn updates topic's queues from a route's write queues. Caller holds mu.
func (c *queueChooser) learn(topic string, mqs []*primitive.MessageQueue) *topicQueues {
	tq := c.topics[topic]
	if tq != nil && len(mqs) > 0 && len(tq.seen) == len(mqs) && &tq.seen[0] == &mqs[0] {
		return tq // the client's list is replaced, never changed in place, when the route changes
	}
	cur := map[string]int{}
	for _, q := range mqs {
		cur[q.BrokerName] = max(cur[q.BrokerName], q.QueueId+1)
	}
	if tq == nil {
		tq = &topicQueues{}
		c.topics[topic] = tq
	}
	tq.seen = mqs
	if mapsEqual(tq.current, cur) {
		return tq
	}
	tq.current = cur
	before := len(tq.all)
	all := slices.DeleteFunc(slices.Clone(tq.all), func(q queueRef) bool {
		n, ok := cur[q.broker]
		return ok && q.id >= n // the broker is in the route with fewer queues: an operator's change
	})
	for b, n := range cur {
		for id := range n {
			if !slices.Contains(all, queueRef{b, id}) {
				all = append(all, queueRef{b, id})
			}
		}
	}
	slices.SortFunc(all, func(a, b queueRef) int { return cmp.Or(cmp.Compare(a.broker, b.broker), cmp.Compare(a.id, b.id)) })
	if before > 0 && !slices.Equal(all, tq.all) {
		c.log.Warn().Str("topic", topic).Int("queues_before", before).Int("queues_now", len(all)).
			Msg("the topic's queues changed: ordered keys now hash over the new set, so some keys move to another queue")
	}
	tq.all = all
	return tq
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// stable returns key's queue: a hash over every queue the topic was seen with. For a topic
// on one broker it is the queue rocketmq-client-go's hash selector chooses.
func (tq *topicQueues) stable(key string) queueRef {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return tq.all[h.Sum32()%uint32(len(tq.all))]
}

func (tq *topicQueues) mq(topic string, q queueRef) *primitive.MessageQueue {
	return &primitive.MessageQueue{Topic: topic, BrokerName: q.broker, QueueId: q.id}
}

// keyQueue returns the queue of topic that the messages of every key of keys go to (the
// stable hash, ordered route or not), and false while the topic's queues are not known or
// when the keys go to different queues.
func (c *queueChooser) keyQueue(topic string, keys ...string) (queueRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tq := c.topics[topic]
	if tq == nil || len(tq.all) == 0 {
		return queueRef{}, false
	}
	q := tq.stable(keys[0])
	for _, k := range keys[1:] {
		if tq.stable(k) != q {
			return queueRef{}, false
		}
	}
	return q, true
}

// inRoute reports whether q is a write queue of the latest route.
func (tq *topicQueues) inRoute(q queueRef) bool { return q.id < tq.current[q.broker] }

// usable reports whether broker may be sent to now: it is not down, or its probe is due,
// which this call takes (the next probe is a probe interval later). Caller holds mu.
func (c *queueChooser) usable(broker string, now time.Time) bool {
	d := c.down[broker]
	if d == nil {
		return true
	}
	if now.Before(d.probeAt) {
		return false
	}
	d.probeAt = now.Add(brokerProbeInterval)
	return true
}

// roundRobin returns the next queue of the route on a usable broker other than avoid; when
// there is none, the next queue of the route (the send will fail and say why). ok is false
// when no usable broker was found. Caller holds mu.
func (c *queueChooser) roundRobin(tq *topicQueues, avoid string) (q queueRef, ok bool) {
	now := time.Now()
	var route []queueRef
	for _, r := range tq.all {
		if tq.inRoute(r) {
			route = append(route, r)
		}
	}
	if len(route) == 0 {
		return tq.all[0], false
	}
	// A down broker whose probe is due gets this message; the others get round robin.
	for b := range tq.current {
		if d := c.down[b]; d != nil && b != avoid && !now.Before(d.probeAt) && c.usable(b, now) {
			for _, r := range route {
				if r.broker == b {
					return r, true
				}
			}
		}
	}
	for range route {
		tq.next++
		r := route[tq.next%uint32(len(route))]
		if r.broker != avoid && c.down[r.broker] == nil {
			return r, true
		}
	}
	tq.next++
	return route[tq.next%uint32(len(route))], false
}

// waitError is the error of an ordered message that waits for its queue's broker.
type waitError struct {
	topic, key, broker string
	addr               string // the broker's address when known, else its name
	queue              int
	since              time.Time
}

func (e *waitError) Error() string {
	return fmt.Sprintf("ordered key %q of topic %s waits for its queue %d on broker %s (down since %s)",
		e.key, e.topic, e.queue, e.broker, e.since.UTC().Format(time.RFC3339))
}

// pick chooses the queue of a send before it is made, once the topic's route is known (nil
// otherwise: Select chooses). An ordered key always gets its stable queue, or a waitError
// while that queue is out of the route; a send to a down broker fails and the relay defers
// the row. Other messages avoid down brokers.
func (c *queueChooser) pick(topic, key string, ordered bool) (*primitive.MessageQueue, *waitError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tq := c.topics[topic]
	if tq == nil || len(tq.all) == 0 {
		return nil, nil
	}
	now := time.Now()
	if key != "" {
		q := tq.stable(key)
		switch {
		case ordered && !tq.inRoute(q):
			return nil, c.wait(topic, key, q, now)
		case ordered || (tq.inRoute(q) && c.usable(q.broker, now)):
			return tq.mq(topic, q), nil
		}
	}
	q, _ := c.roundRobin(tq, "")
	return tq.mq(topic, q), nil
}

// wait returns the waitError of key, whose queue q is out of the route, and logs it.
// Caller holds mu.
func (c *queueChooser) wait(topic, key string, q queueRef, now time.Time) *waitError {
	d := c.down[q.broker]
	if d == nil {
		// Out of the route while no send to it failed (read-only, or dropped by the name
		// server): down all the same, since now.
		d = &downBroker{since: now, probeAt: now.Add(brokerProbeInterval), err: "not in the topic's route"}
		c.down[q.broker] = d
	}
	c.logWait(topic, key, q, d)
	addr := q.broker
	for a, b := range c.addrs {
		if b == q.broker {
			addr = a
		}
	}
	return &waitError{topic: topic, key: key, broker: q.broker, addr: addr, queue: q.id, since: d.since}
}

// waiting logs, once per queue and outage, that an ordered key of topic waits for the down
// broker of its queue mq.
func (c *queueChooser) waiting(topic, key string, mq *primitive.MessageQueue) {
	if mq == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.down[mq.BrokerName]; d != nil {
		c.logWait(topic, key, queueRef{mq.BrokerName, mq.QueueId}, d)
	}
}

// logWait logs the first key seen waiting for queue q of down broker d. Caller holds mu.
func (c *queueChooser) logWait(topic, key string, q queueRef, d *downBroker) {
	if d.waits == nil {
		d.waits = map[queueRef]bool{}
	}
	if !d.waits[q] {
		d.waits[q] = true
		c.log.Warn().Str("topic", topic).Str("broker", q.broker).Int("queue", q.id).Str("sharding_key", key).
			Msg("ordered messages of this queue wait for its broker (not sent elsewhere, no retry counted)")
	}
}

// failover returns a queue of topic on a usable broker other than broker, or nil.
func (c *queueChooser) failover(topic, broker string) *primitive.MessageQueue {
	c.mu.Lock()
	defer c.mu.Unlock()
	tq := c.topics[topic]
	if tq == nil || len(tq.all) == 0 {
		return nil
	}
	q, ok := c.roundRobin(tq, broker)
	if !ok || q.broker == broker {
		return nil
	}
	return tq.mq(topic, q)
}

// sent records a send acknowledged by broker at addr, which ends the broker's outage.
func (c *queueChooser) sent(broker, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if addr != "" {
		c.addrs[addr] = broker
	}
	if d := c.down[broker]; d != nil {
		delete(c.down, broker)
		c.log.Info().Str("broker", broker).Float64("down_s", time.Since(d.since).Seconds()).Int("ordered_queues_waited", len(d.waits)).
			Msg("broker back: sends to it resume")
	}
}

// nameOf returns the name of the broker at addr, "" when no send went there yet.
func (c *queueChooser) nameOf(addr string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addrs[addr]
}

// attempted records the broker address a send went to.
func (c *queueChooser) attempted(broker, addr string) {
	if addr == "" || broker == "" {
		return
	}
	c.mu.Lock()
	c.addrs[addr] = broker
	c.mu.Unlock()
}

// failed records a send to the broker at addr that got no answer (refused, reset, timed
// out), and returns the broker's name ("" when unknown) and whether it was down already (the
// send was a probe). The broker is down from the first refused connection (refused), or
// from the second send without an answer within strikeWindow: a single dropped connection
// does not stop its ordered keys.
func (c *queueChooser) failed(addr string, err error, refused bool) (broker string, wasDown bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	broker = c.addrs[addr]
	if broker == "" {
		return "", false
	}
	now := time.Now()
	d := c.down[broker]
	wasDown = d != nil
	if d == nil && !refused {
		if last, ok := c.strikes[broker]; !ok || now.Sub(last) > strikeWindow {
			c.strikes[broker] = now
			return broker, false
		}
	}
	delete(c.strikes, broker)
	if d == nil {
		d = &downBroker{since: now}
		c.down[broker] = d
		c.log.Warn().Str("broker", broker).Str("addr", addr).Err(err).
			Msg("broker down: unordered messages go to the topic's other brokers; ordered keys of its queues wait")
	}
	d.err = err.Error()
	d.probeAt = now.Add(brokerProbeInterval)
	return broker, wasDown
}
