// SPDX-License-Identifier: Apache-2.0

// Package recorder is the relay's write side of its Prometheus metrics: the counts of sends,
// retries and dead rows, the backlog, lock and partition gauges of one table. Package
// relay/metrics creates and registers the series and is where users read them (Prometheus,
// Metrics.Activity); only the relay's own packages can import this one, so every count is
// one the relay made (docs/decisions.md, "TableMetrics' mutators").
package recorder

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// Label values that stand for many topics or tags (docs/metrics.md, "Bounded labels").
const (
	// LabelOther is the topic or tag label of messages beyond a table's label budget.
	LabelOther = "_other"
	// LabelInvalid is the topic or tag label of a value RocketMQ would refuse.
	LabelInvalid = "_invalid"
)

// Series are the labelled series every Table records into, and the bound of their topic and
// tag labels; package relay/metrics makes and registers them.
type Series struct {
	// Published, Failed and Dead are by database, table, topic and tag.
	Published, Failed, Dead *prometheus.CounterVec
	// The rest are by database and table, but for PartOwned (and partition), SendFails (and
	// kind) and Misconfig (and topic).
	Pending, OldestDue, DeadRows, UnknownRows *prometheus.GaugeVec
	PublishTime, BatchTime                    *prometheus.HistogramVec
	Leader, LockWait, Members, PartOwned      *prometheus.GaugeVec
	LockLosses, WriteBacks, SendFails         *prometheus.CounterVec
	// Unrecorded counts the sent rows whose positions the stored-position journal missed.
	Unrecorded *prometheus.CounterVec
	Misconfig  *prometheus.GaugeVec

	// Routes are the configured routes: a route whose topic and tag are literal has its own
	// series from zero, and its topic keeps its label when the budget is spent.
	Routes []message.PatternRule
	// MaxLabelPairs bounds, per table, the other topic and tag pairs with labels of their own.
	MaxLabelPairs int
}

// registered is relay/metrics' lookup of a table's recorder (Register).
var registered func(m any, database, table string) *Table

// Register makes For answer with f. Package relay/metrics calls it from its init, with the
// function that finds or creates a table's recorder in its *metrics.Metrics.
func Register(f func(m any, database, table string) *Table) { registered = f }

// For returns the recorder of table of database in m, a *metrics.Metrics, creating every
// series of the table at zero on first use (so that a standby exports them all); later
// calls return the same recorder. A nil m (or a nil *metrics.Metrics) returns nil, which
// records nothing.
func For(m any, database, table string) *Table {
	if m == nil || registered == nil {
		return nil
	}
	return registered(m, database, table)
}

// Table records the metrics of one table. Its methods are safe for concurrent use; on a nil
// *Table they do nothing.
type Table struct {
	s               *Series
	database, table string
	publish, batch  prometheus.Observer
	leader          prometheus.Gauge
	pending         prometheus.Gauge
	oldestDue       prometheus.Gauge
	deadRows        prometheus.Gauge
	unknown         prometheus.Gauge
	lockWait        prometheus.Gauge
	lockLosses      prometheus.Counter
	writeBacks      prometheus.Counter
	unrecorded      prometheus.Counter
	// counted feeds the dashboard's activity minutes (relay/metrics).
	counted func(sent, failed, dead int)

	mu     sync.Mutex
	owned  map[int]bool               // partitions whose lock this process holds
	pairs  map[[2]string]pairCounters // topic and tag labels -> their counters
	topics map[string]bool            // topics with a label of their own
	others int                        // pairs admitted under the budget
}

// pairCounters are the counters of one topic and tag label pair, created together so that
// a pair's dead counter is at 0 once any of its messages was counted.
type pairCounters struct {
	published, failed, dead prometheus.Counter
}

// NewTable returns the recorder of table of database with every series of the table at zero;
// counted, when not nil, is told every count of sent, failed and dead messages too.
func NewTable(s *Series, database, table string, counted func(sent, failed, dead int)) *Table {
	if counted == nil {
		counted = func(int, int, int) {}
	}
	t := &Table{
		s: s, database: database, table: table, counted: counted,
		publish:    s.PublishTime.WithLabelValues(database, table),
		batch:      s.BatchTime.WithLabelValues(database, table),
		leader:     s.Leader.WithLabelValues(database, table),
		pending:    s.Pending.WithLabelValues(database, table),
		oldestDue:  s.OldestDue.WithLabelValues(database, table),
		deadRows:   s.DeadRows.WithLabelValues(database, table),
		unknown:    s.UnknownRows.WithLabelValues(database, table),
		lockWait:   s.LockWait.WithLabelValues(database, table),
		lockLosses: s.LockLosses.WithLabelValues(database, table),
		writeBacks: s.WriteBacks.WithLabelValues(database, table),
		unrecorded: s.Unrecorded.WithLabelValues(database, table),
		pairs:      map[[2]string]pairCounters{},
		topics:     map[string]bool{},
	}
	// Every gauge and counter is created at zero by WithLabelValues; leader too, explicitly.
	t.leader.Set(0)
	for _, k := range message.SendErrorKinds() {
		s.SendFails.WithLabelValues(database, table, k.String())
	}
	for _, r := range s.Routes {
		if !literal(r.Topic) || outbox.ValidateTopic(r.Topic) != nil {
			continue
		}
		t.topics[r.Topic] = true
		if r.Tag != "" && literal(r.Tag) && outbox.ValidateTag(r.Tag) == nil {
			t.add([2]string{r.Topic, r.Tag})
		}
	}
	return t
}

// literal reports whether a route pattern matches only itself.
func literal(pattern string) bool {
	return !strings.ContainsAny(pattern, `*?[\`)
}

// Published counts n messages of topic and tag acknowledged by the broker and marked sent.
func (t *Table) Published(topic, tag string, n int) {
	if t != nil && n > 0 {
		t.pair(topic, tag).published.Add(float64(n))
		t.counted(n, 0, 0)
	}
}

// Failed counts n failed publish attempts of messages of topic and tag.
func (t *Table) Failed(topic, tag string, n int) {
	if t != nil && n > 0 {
		t.pair(topic, tag).failed.Add(float64(n))
		t.counted(0, n, 0)
	}
}

// Dead counts n messages of topic and tag marked dead.
func (t *Table) Dead(topic, tag string, n int) {
	if t != nil && n > 0 {
		t.pair(topic, tag).dead.Add(float64(n))
		t.counted(0, 0, n)
	}
}

// ObservePublish records the duration of one broker send.
func (t *Table) ObservePublish(d time.Duration) {
	if t != nil {
		t.publish.Observe(d.Seconds())
	}
}

// ObserveBatch records the duration of one batch.
func (t *Table) ObserveBatch(d time.Duration) {
	if t != nil {
		t.batch.Observe(d.Seconds())
	}
}

// SendFailed counts n failed sends of kind.
func (t *Table) SendFailed(kind message.SendErrorKind, n int) {
	if t != nil && n > 0 {
		t.s.SendFails.WithLabelValues(t.database, t.table, kind.String()).Add(float64(n))
	}
}

// SetMisconfigured records whether sends of topic are refused for the relay's configuration;
// a topic's series is removed when it is no longer refused.
func (t *Table) SetMisconfigured(topic string, on bool) {
	if t == nil {
		return
	}
	if on {
		t.s.Misconfig.WithLabelValues(t.database, t.table, topic).Set(1)
		return
	}
	t.s.Misconfig.DeleteLabelValues(t.database, t.table, topic)
}

// SetLeader sets whether this process holds the table's lock; becoming the leader ends
// the lock wait.
func (t *Table) SetLeader(on bool) {
	if t == nil {
		return
	}
	if on {
		t.leader.Set(1)
		t.lockWait.Set(0)
		return
	}
	t.leader.Set(0)
}

// InitPartitions exports outbox_relay_partition_owned at 0 for each of the table's n
// partitions, and outbox_relay_group_members at 0.
func (t *Table) InitPartitions(n int) {
	if t == nil {
		return
	}
	for p := 0; p < n; p++ {
		t.s.PartOwned.WithLabelValues(t.database, t.table, strconv.Itoa(p)).Set(0)
	}
	t.s.Members.WithLabelValues(t.database, t.table).Set(0)
}

// SetPartitionOwned sets whether this process holds partition p's lock. outbox_relay_leader
// is 1 while it holds any.
func (t *Table) SetPartitionOwned(p int, on bool) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.owned == nil {
		t.owned = map[int]bool{}
	}
	if on {
		t.owned[p] = true
		t.s.PartOwned.WithLabelValues(t.database, t.table, strconv.Itoa(p)).Set(1)
	} else {
		delete(t.owned, p)
		t.s.PartOwned.WithLabelValues(t.database, t.table, strconv.Itoa(p)).Set(0)
	}
	t.SetLeader(len(t.owned) > 0)
}

// SetGroupMembers records how many relays share the table's partitions.
func (t *Table) SetGroupMembers(n int) {
	if t != nil {
		t.s.Members.WithLabelValues(t.database, t.table).Set(float64(n))
	}
}

// LockLost counts a failed extension of the table's lock.
func (t *Table) LockLost() {
	if t != nil {
		t.lockLosses.Inc()
	}
}

// WriteBackFailed counts a write-back the database refused or did not answer.
func (t *Table) WriteBackFailed() {
	if t != nil {
		t.writeBacks.Inc()
	}
}

// AuditUnrecorded counts n sent rows whose positions the stored-position journal dropped
// (its queue full, or appends refused): the broker audit never checks them.
func (t *Table) AuditUnrecorded(n int) {
	if t != nil {
		t.unrecorded.Add(float64(n))
	}
}

// SetBacklog sets the backlog gauges: rows pending or failed, and how long the oldest due
// row has been due (0 when none is).
func (t *Table) SetBacklog(pending int64, oldestDueSeconds float64) {
	if t != nil {
		t.pending.Set(float64(pending))
		t.oldestDue.Set(oldestDueSeconds)
	}
}

// SetDeadRows sets the number of dead rows in the table.
func (t *Table) SetDeadRows(n int64) {
	if t != nil {
		t.deadRows.Set(float64(n))
	}
}

// SetUnknownRows sets the number of rows of unknown status in the table.
func (t *Table) SetUnknownRows(n int64) {
	if t != nil {
		t.unknown.Set(float64(n))
	}
}

// SetLockWait sets how long this process has waited for the table's lock so far.
func (t *Table) SetLockWait(d time.Duration) {
	if t != nil {
		t.lockWait.Set(d.Seconds())
	}
}

// pair returns the counters of a message's topic and tag under the table's label bound:
// values RocketMQ would refuse become "_invalid"; configured route pairs and the first
// MaxLabelPairs other pairs keep their labels; later pairs count under (topic, "_other")
// when the topic has a label of its own, else under ("_other", "_other").
func (t *Table) pair(topic, tag string) pairCounters {
	if outbox.ValidateTopic(topic) != nil {
		topic = LabelInvalid
	}
	if outbox.ValidateTag(tag) != nil {
		tag = LabelInvalid
	}
	k := [2]string{topic, tag}
	t.mu.Lock()
	defer t.mu.Unlock()
	if c, ok := t.pairs[k]; ok {
		return c
	}
	if t.others < t.s.MaxLabelPairs {
		t.others++
		t.topics[topic] = true
		return t.add(k)
	}
	if t.topics[topic] {
		k[1] = LabelOther
	} else {
		k = [2]string{LabelOther, LabelOther}
	}
	if c, ok := t.pairs[k]; ok {
		return c
	}
	return t.add(k)
}

// add creates the counters of a label pair at zero.
func (t *Table) add(k [2]string) pairCounters {
	c := pairCounters{
		published: t.s.Published.WithLabelValues(t.database, t.table, k[0], k[1]),
		failed:    t.s.Failed.WithLabelValues(t.database, t.table, k[0], k[1]),
		dead:      t.s.Dead.WithLabelValues(t.database, t.table, k[0], k[1]),
	}
	t.pairs[k] = c
	return c
}
