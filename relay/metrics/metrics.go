// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"runtime"
	"runtime/debug"
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
	// LabelInvalid is the topic or tag label of a value RocketMQ would refuse (a garbage
	// topic of a dead row, say): such values are never labels of their own.
	LabelInvalid = "_invalid"
)

// DefaultMaxLabelPairs is MetricsOptions.MaxLabelPairs when it is zero.
const DefaultMaxLabelPairs = 100

// MetricsOptions bound the topic and tag labels of the relay's counters.
type MetricsOptions struct {
	// Routes are the configured routes. A route whose topic and tag are both literal (no
	// glob characters) has its own series, exported from zero; a route's literal topic keeps
	// its own topic label even when the table's budget is spent. Defaults to none.
	Routes []message.PatternRule
	// MaxLabelPairs bounds, per table, the other topic and tag pairs counted under their
	// own labels. Beyond it a message counts under tag "_other" of its topic when that topic
	// already has a series, else under topic and tag "_other". Defaults to 100.
	MaxLabelPairs int
}

// Metrics are the relay's Prometheus metrics, prefixed outbox_relay_. One Metrics serves any
// number of relays: every series carries the database and the table, and Table gives a
// relay its handle. A nil *Metrics records nothing.
type Metrics struct {
	opts        MetricsOptions
	published   *prometheus.CounterVec
	failed      *prometheus.CounterVec
	dead        *prometheus.CounterVec
	pending     *prometheus.GaugeVec
	oldestDue   *prometheus.GaugeVec
	deadRows    *prometheus.GaugeVec
	unknownRows *prometheus.GaugeVec
	publishTime *prometheus.HistogramVec
	batchTime   *prometheus.HistogramVec
	leader      *prometheus.GaugeVec
	lockWait    *prometheus.GaugeVec
	lockLosses  *prometheus.CounterVec
	writeBacks  *prometheus.CounterVec
	partOwned   *prometheus.GaugeVec
	members     *prometheus.GaugeVec
	buildInfo   *prometheus.GaugeVec
	sendFails   *prometheus.CounterVec
	misconfig   *prometheus.GaugeVec
	unrepl      *prometheus.CounterVec
	connWatch   *prometheus.GaugeVec

	mu     sync.Mutex
	tables map[[2]string]*TableMetrics
	// now is the clock of the dashboard's activity minutes (time.Now; tests set their own).
	now func() time.Time
}

// NewMetrics creates the metrics with the default options and registers them with reg (a
// nil reg registers nothing, for tests and embedding).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	return NewMetricsWith(reg, MetricsOptions{})
}

// NewMetricsWith creates the metrics with opts and registers them with reg (a nil reg
// registers nothing). outbox_relay_build_info starts with the module's version as the Go
// build records it; the binary sets its own with SetBuildInfo.
func NewMetricsWith(reg prometheus.Registerer, opts MetricsOptions) *Metrics {
	if opts.MaxLabelPairs <= 0 {
		opts.MaxLabelPairs = DefaultMaxLabelPairs
	}
	byTable := []string{"database", "table"}
	byTopic := []string{"database", "table", "topic", "tag"}
	m := &Metrics{
		opts: opts,
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_published_total", Help: "Messages acknowledged by the broker and marked sent.",
		}, byTopic),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_failed_total", Help: "Failed publish attempts: retried later, dead when out of retries, or deferred by a broker incident.",
		}, byTopic),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_dead_total", Help: "Messages marked dead: out of retries or never sendable.",
		}, byTopic),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_pending", Help: "Rows pending or failed-will-retry (the backlog), sampled every 5s; rows marked is_deleted are left out.",
		}, byTable),
		oldestDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_oldest_due_age_seconds", Help: "Time since the oldest due row became due; grows when delivery stalls. Sampled every 5s.",
		}, byTable),
		deadRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_dead_rows", Help: "Dead rows in the table (status 3, not deleted), waiting for an operator. Sampled every 5s.",
		}, byTable),
		unknownRows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_unknown_status_rows", Help: "Rows whose status is NULL or outside 0-4: never sent, waiting for an operator. Sampled every 5s.",
		}, byTable),
		publishTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_publish_duration_seconds", Help: "Duration of one broker send (one message or one batch request).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, byTable),
		batchTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_batch_duration_seconds", Help: "Duration of one batch: publish and write-back of up to relay.batch_size rows.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, byTable),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_leader", Help: "1 while this process holds the table's lock and publishes, else 0.",
		}, byTable),
		lockWait: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_lock_wait_seconds", Help: "How long this process has waited for the table's lock; 0 while it is the leader.",
		}, byTable),
		lockLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_lock_losses_total", Help: "Times the lock could not be extended and publishing stopped.",
		}, byTable),
		writeBacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_writeback_failures_total", Help: "Write-backs the database refused or did not answer; publishing pauses until one succeeds.",
		}, byTable),
		partOwned: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_partition_owned", Help: "1 while this process holds the lock of the table's partition and publishes its rows, else 0 (relay.partitions > 1).",
		}, []string{"database", "table", "partition"}),
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_group_members", Help: "Relays sharing the table's partitions, as this process last saw them in Redis (relay.partitions > 1).",
		}, byTable),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_build_info", Help: "Always 1; its labels name the relay's version, commit and Go version.",
		}, []string{"version", "commit", "goversion"}),
		sendFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_send_failures_total", Help: "Failed broker sends by what they mean (kind): transient, unreachable, refused, permanent, topic_missing, misconfigured, unreplicated.",
		}, []string{"database", "table", "kind"}),
		misconfig: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_topic_misconfigured", Help: "1 while sends of the topic are refused for the relay's configuration (ACL permission or credentials, message type); its rows wait, none goes dead.",
		}, []string{"database", "table", "topic"}),
		unrepl: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_sent_unreplicated_total", Help: "Messages the broker stored on its master without replicating or flushing them as configured (status), marked sent.",
		}, []string{"status"}),
		connWatch: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_rocketmq_connection_watch", Help: "1 while the sends of the producer group are watched for dropped connections (sent again at once when theirs closes); 0 when they are not and a dropped connection costs its sends the send timeout.",
		}, []string{"group"}),
		tables: map[[2]string]*TableMetrics{},
		now:    time.Now,
	}
	m.SetBuildInfo(moduleVersion())
	for _, st := range []string{"SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT", "FLUSH_DISK_TIMEOUT"} {
		m.unrepl.WithLabelValues(st) // exported from zero
	}
	if reg != nil {
		reg.MustRegister(m.published, m.failed, m.dead, m.pending, m.oldestDue, m.deadRows, m.unknownRows, m.publishTime,
			m.batchTime, m.leader, m.lockWait, m.lockLosses, m.writeBacks, m.partOwned, m.members, m.buildInfo,
			m.sendFails, m.misconfig, m.unrepl, m.connWatch)
	}
	return m
}

// SetBuildInfo sets outbox_relay_build_info's version and commit labels (goversion is the
// running Go's), replacing the previous ones.
func (m *Metrics) SetBuildInfo(version, commit string) {
	if m == nil {
		return
	}
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, commit, runtime.Version()).Set(1)
}

// moduleVersion returns this module's version and VCS revision as the Go build recorded
// them, "unknown" where it did not.
func moduleVersion() (version, commit string) {
	const module = "github.com/outbox-relay/outbox-relay"
	version, commit = "unknown", "unknown"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return version, commit
	}
	if bi.Main.Path == module {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && s.Value != "" {
				commit = s.Value
			}
		}
		return version, commit
	}
	for _, d := range bi.Deps {
		if d.Path == module && d.Version != "" {
			version = d.Version
		}
	}
	return version, commit
}

// Table returns the handle of one table's series, creating it on first use with every
// series of the table at zero (so that a standby or a freshly started relay exports them
// all); later calls return the same handle. database names the database (server/schema, no
// credentials; may be empty). A nil *Metrics returns a nil handle, which records nothing.
func (m *Metrics) Table(database, table string) *TableMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := [2]string{database, table}
	if t, ok := m.tables[key]; ok {
		return t
	}
	t := &TableMetrics{
		m: m, database: database, table: table,
		publish:    m.publishTime.WithLabelValues(database, table),
		batch:      m.batchTime.WithLabelValues(database, table),
		leader:     m.leader.WithLabelValues(database, table),
		pending:    m.pending.WithLabelValues(database, table),
		oldestDue:  m.oldestDue.WithLabelValues(database, table),
		deadRows:   m.deadRows.WithLabelValues(database, table),
		unknown:    m.unknownRows.WithLabelValues(database, table),
		lockWait:   m.lockWait.WithLabelValues(database, table),
		lockLosses: m.lockLosses.WithLabelValues(database, table),
		writeBacks: m.writeBacks.WithLabelValues(database, table),
		pairs:      map[[2]string]pairCounters{},
		topics:     map[string]bool{},
		minutes:    &minuteRing{now: m.now},
	}
	// Every gauge and counter is created at zero by WithLabelValues; leader too, explicitly.
	t.leader.Set(0)
	for _, k := range message.SendErrorKinds() {
		m.sendFails.WithLabelValues(database, table, k.String())
	}
	for _, r := range m.opts.Routes {
		if !literal(r.Topic) || outbox.ValidateTopic(r.Topic) != nil {
			continue
		}
		t.topics[r.Topic] = true
		if r.Tag != "" && literal(r.Tag) && outbox.ValidateTag(r.Tag) == nil {
			t.add([2]string{r.Topic, r.Tag})
		}
	}
	m.tables[key] = t
	return t
}

// literal reports whether a route pattern matches only itself.
func literal(pattern string) bool {
	return !strings.ContainsAny(pattern, `*?[\`)
}

// TableMetrics records the metrics of one table. Its methods are safe for concurrent use;
// on a nil *TableMetrics they do nothing.
//
// Its mutators (Published, Failed, Dead, ObservePublish, ObserveBatch, SendFailed,
// SetMisconfigured, SetLeader, InitPartitions, SetPartitionOwned, SetGroupMembers, LockLost,
// WriteBackFailed, SetBacklog, SetDeadRows, SetUnknownRows, SetLockWait) are the relay's
// own: only the engine and its publisher call them, and code outside this module should
// not, since a count it adds is a count the relay did not make. They are not covered by
// the compatibility of v1 and may become unexported (docs/decisions.md, "TableMetrics'
// mutators").
type TableMetrics struct {
	m               *Metrics
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

	mu     sync.Mutex
	owned  map[int]bool               // partitions whose lock this process holds
	pairs  map[[2]string]pairCounters // topic and tag labels -> their counters
	topics map[string]bool            // topics with a label of their own
	others int                        // pairs admitted under the budget

	minutes *minuteRing // the last hour's counts, for the dashboard (activity.go)
}

// pairCounters are the counters of one topic and tag label pair, created together so that
// a pair's dead counter is at 0 once any of its messages was counted.
type pairCounters struct {
	published, failed, dead prometheus.Counter
}

// Published counts n messages of topic and tag acknowledged by the broker and marked sent.
func (t *TableMetrics) Published(topic, tag string, n int) {
	if t != nil && n > 0 {
		t.pair(topic, tag).published.Add(float64(n))
		t.minutes.add(n, 0, 0)
	}
}

// Failed counts n failed publish attempts of messages of topic and tag.
func (t *TableMetrics) Failed(topic, tag string, n int) {
	if t != nil && n > 0 {
		t.pair(topic, tag).failed.Add(float64(n))
		t.minutes.add(0, n, 0)
	}
}

// Dead counts n messages of topic and tag marked dead.
func (t *TableMetrics) Dead(topic, tag string, n int) {
	if t != nil && n > 0 {
		t.pair(topic, tag).dead.Add(float64(n))
		t.minutes.add(0, 0, n)
	}
}

// ObservePublish records the duration of one broker send.
func (t *TableMetrics) ObservePublish(d time.Duration) {
	if t != nil {
		t.publish.Observe(d.Seconds())
	}
}

// ObserveBatch records the duration of one batch.
func (t *TableMetrics) ObserveBatch(d time.Duration) {
	if t != nil {
		t.batch.Observe(d.Seconds())
	}
}

// SetLeader sets whether this process holds the table's lock; becoming the leader ends
// the lock wait.
func (t *TableMetrics) SetLeader(on bool) {
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
func (t *TableMetrics) InitPartitions(n int) {
	if t == nil {
		return
	}
	for p := 0; p < n; p++ {
		t.m.partOwned.WithLabelValues(t.database, t.table, strconv.Itoa(p)).Set(0)
	}
	t.m.members.WithLabelValues(t.database, t.table).Set(0)
}

// SetPartitionOwned sets whether this process holds partition p's lock. outbox_relay_leader
// is 1 while it holds any.
func (t *TableMetrics) SetPartitionOwned(p int, on bool) {
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
		t.m.partOwned.WithLabelValues(t.database, t.table, strconv.Itoa(p)).Set(1)
	} else {
		delete(t.owned, p)
		t.m.partOwned.WithLabelValues(t.database, t.table, strconv.Itoa(p)).Set(0)
	}
	t.SetLeader(len(t.owned) > 0)
}

// SetGroupMembers records how many relays share the table's partitions.
func (t *TableMetrics) SetGroupMembers(n int) {
	if t != nil {
		t.m.members.WithLabelValues(t.database, t.table).Set(float64(n))
	}
}

// LockLost counts a failed extension of the table's lock.
func (t *TableMetrics) LockLost() {
	if t != nil {
		t.lockLosses.Inc()
	}
}

// WriteBackFailed counts a write-back the database refused or did not answer.
func (t *TableMetrics) WriteBackFailed() {
	if t != nil {
		t.writeBacks.Inc()
	}
}

// SetBacklog sets the backlog gauges: rows pending or failed, and how long the oldest due
// row has been due (0 when none is).
func (t *TableMetrics) SetBacklog(pending int64, oldestDueSeconds float64) {
	if t != nil {
		t.pending.Set(float64(pending))
		t.oldestDue.Set(oldestDueSeconds)
	}
}

// SetDeadRows sets the number of dead rows in the table.
func (t *TableMetrics) SetDeadRows(n int64) {
	if t != nil {
		t.deadRows.Set(float64(n))
	}
}

// SetUnknownRows sets the number of rows of unknown status in the table.
func (t *TableMetrics) SetUnknownRows(n int64) {
	if t != nil {
		t.unknown.Set(float64(n))
	}
}

// SetLockWait sets how long this process has waited for the table's lock so far.
func (t *TableMetrics) SetLockWait(d time.Duration) {
	if t != nil {
		t.lockWait.Set(d.Seconds())
	}
}

// pair returns the counters of a message's topic and tag under the table's label bound:
// values RocketMQ would refuse become "_invalid"; configured route pairs and the first
// MaxLabelPairs other pairs keep their labels; later pairs count under (topic, "_other")
// when the topic has a label of its own, else under ("_other", "_other").
func (t *TableMetrics) pair(topic, tag string) pairCounters {
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
	if t.others < t.m.opts.MaxLabelPairs {
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
func (t *TableMetrics) add(k [2]string) pairCounters {
	c := pairCounters{
		published: t.m.published.WithLabelValues(t.database, t.table, k[0], k[1]),
		failed:    t.m.failed.WithLabelValues(t.database, t.table, k[0], k[1]),
		dead:      t.m.dead.WithLabelValues(t.database, t.table, k[0], k[1]),
	}
	t.pairs[k] = c
	return c
}

// SentUnreplicated counts n messages stored without replication or flush, answered status.
func (m *Metrics) SentUnreplicated(status string, n int) {
	if m != nil && n > 0 {
		m.unrepl.WithLabelValues(status).Add(float64(n))
	}
}

// SendFailed counts n failed sends of kind.
func (t *TableMetrics) SendFailed(kind message.SendErrorKind, n int) {
	if t != nil && n > 0 {
		t.m.sendFails.WithLabelValues(t.database, t.table, kind.String()).Add(float64(n))
	}
}

// SetMisconfigured records whether sends of topic are refused for the relay's configuration;
// a topic's series is removed when it is no longer refused.
func (t *TableMetrics) SetMisconfigured(topic string, on bool) {
	if t == nil {
		return
	}
	if on {
		t.m.misconfig.WithLabelValues(t.database, t.table, topic).Set(1)
		return
	}
	t.m.misconfig.DeleteLabelValues(t.database, t.table, topic)
}

// ConnectionWatch sets outbox_relay_rocketmq_connection_watch of producer group: 1 when every
// producer's sends are watched for dropped connections, else 0.
func (m *Metrics) ConnectionWatch(group string, active bool) {
	if m == nil {
		return
	}
	v := 0.0
	if active {
		v = 1
	}
	m.connWatch.WithLabelValues(group).Set(v)
}
