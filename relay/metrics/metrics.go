// SPDX-License-Identifier: Apache-2.0

// Package metrics holds the relay's Prometheus metrics (docs/metrics.md): NewMetrics creates
// and registers them, relay.Config.Metrics hands them to the relays, which record into them
// (relay/internal/recorder), and a process reads them through its registry and Activity.
package metrics

import (
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/relay/internal/recorder"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// Label values that stand for many topics or tags (docs/metrics.md, "Bounded labels").
const (
	// LabelOther is the topic or tag label of messages beyond a table's label budget.
	LabelOther = recorder.LabelOther // "_other"
	// LabelInvalid is the topic or tag label of a value RocketMQ would refuse (a garbage
	// topic of a dead row, say): such values are never labels of their own.
	LabelInvalid = recorder.LabelInvalid // "_invalid"
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
// number of relays: every series carries the database and the table. The relay records into
// them itself; a process reads them through Prometheus and Activity. A nil *Metrics records
// nothing.
type Metrics struct {
	series    recorder.Series // the tables' series, recorded by the relay
	buildInfo *prometheus.GaugeVec
	unrepl    *prometheus.CounterVec
	connWatch *prometheus.GaugeVec

	mu     sync.Mutex
	tables map[[2]string]*tableEntry
	// now is the clock of the dashboard's activity minutes (time.Now; tests set their own).
	now func() time.Time
}

// tableEntry is one table's recorder and the last hour's counts it fed (activity.go).
type tableEntry struct {
	rec     *recorder.Table
	minutes *minuteRing
}

// init lets the relay's packages reach a table's recorder in a *Metrics (recorder.For).
func init() {
	recorder.Register(func(m any, database, table string) *recorder.Table {
		mm, _ := m.(*Metrics)
		return mm.table(database, table)
	})
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
	m := &Metrics{
		series: newSeries(opts),
		buildInfo: gaugeVec("outbox_relay_build_info", "Always 1; its labels name the relay's version, commit and Go version.",
			"version", "commit", "goversion"),
		unrepl: counterVec("outbox_relay_sent_unreplicated_total", "Messages the broker stored on its master without replicating or flushing them as configured (status), marked sent.",
			"status"),
		connWatch: gaugeVec("outbox_relay_rocketmq_connection_watch", "1 while the sends of the producer group are watched for dropped connections (sent again at once when theirs closes); 0 when they are not and a dropped connection costs its sends the send timeout.",
			"group"),
		tables: map[[2]string]*tableEntry{},
		now:    time.Now,
	}
	m.SetBuildInfo(moduleVersion())
	for _, st := range []string{"SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT", "FLUSH_DISK_TIMEOUT"} {
		m.unrepl.WithLabelValues(st) // exported from zero
	}
	if reg != nil {
		s := &m.series
		reg.MustRegister(s.Published, s.Failed, s.Dead, s.Pending, s.OldestDue, s.DeadRows, s.UnknownRows, s.PublishTime,
			s.BatchTime, s.Leader, s.LockWait, s.LockLosses, s.WriteBacks, s.Unrecorded, s.PartOwned, s.Members, m.buildInfo,
			s.SendFails, s.Misconfig, m.unrepl, m.connWatch)
	}
	return m
}

// newSeries creates the series of the tables' sends and rows, bounded by opts.
func newSeries(opts MetricsOptions) recorder.Series {
	byTopic := []string{"database", "table", "topic", "tag"}
	return recorder.Series{
		Routes: opts.Routes, MaxLabelPairs: opts.MaxLabelPairs,
		Published: counterVec("outbox_relay_published_total", "Messages acknowledged by the broker and marked sent.", byTopic...),
		Failed: counterVec("outbox_relay_failed_total", "Failed publish attempts: retried later, dead when out of retries, or deferred by a broker incident.",
			byTopic...),
		Dead: counterVec("outbox_relay_dead_total", "Messages marked dead: out of retries or never sendable.", byTopic...),
		Pending: gaugeVec("outbox_relay_pending", "Rows pending or failed-will-retry (the backlog), sampled every 5s; rows marked is_deleted are left out.",
			"database", "table"),
		OldestDue: gaugeVec("outbox_relay_oldest_due_age_seconds", "Time since the oldest due row became due; grows when delivery stalls. Sampled every 5s.",
			"database", "table"),
		DeadRows: gaugeVec("outbox_relay_dead_rows", "Dead rows in the table (status 3, not deleted), waiting for an operator. Sampled every 5s.",
			"database", "table"),
		UnknownRows: gaugeVec("outbox_relay_unknown_status_rows", "Rows whose status is NULL or outside 0-4: never sent, waiting for an operator. Sampled every 5s.",
			"database", "table"),
		PublishTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_publish_duration_seconds", Help: "Duration of one broker send (one message or one batch request).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"database", "table"}),
		BatchTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_batch_duration_seconds", Help: "Duration of one batch: publish and write-back of up to relay.batch_size rows.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"database", "table"}),
		SendFails: counterVec("outbox_relay_send_failures_total", "Failed broker sends by what they mean (kind): transient, unreachable, refused, permanent, topic_missing, misconfigured, unreplicated.",
			"database", "table", "kind"),
		Misconfig: gaugeVec("outbox_relay_topic_misconfigured", "1 while sends of the topic are refused for the relay's configuration (ACL permission or credentials, message type); its rows wait, none goes dead.",
			"database", "table", "topic"),
		LockLosses: counterVec("outbox_relay_lock_losses_total", "Times the lock could not be extended and publishing stopped.", "database", "table"),
		WriteBacks: counterVec("outbox_relay_writeback_failures_total", "Write-backs the database refused or did not answer; publishing pauses until one succeeds.",
			"database", "table"),
		Unrecorded: counterVec("outbox_relay_audit_unrecorded_rows_total", "Sent rows whose broker positions were not recorded in the stored-position journal (its queue full, or appends refused): the broker audit never checks them.",
			"database", "table"),
		Leader:   gaugeVec("outbox_relay_leader", "1 while this process holds the table's lock and publishes, else 0.", "database", "table"),
		LockWait: gaugeVec("outbox_relay_lock_wait_seconds", "How long this process has waited for the table's lock; 0 while it is the leader.", "database", "table"),
		PartOwned: gaugeVec("outbox_relay_partition_owned", "1 while this process holds the lock of the table's partition and publishes its rows, else 0 (relay.partitions > 1).",
			"database", "table", "partition"),
		Members: gaugeVec("outbox_relay_group_members", "Relays sharing the table's partitions, as this process last saw them in Redis (relay.partitions > 1).",
			"database", "table"),
	}
}

// counterVec is a counter named name with help, by labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// gaugeVec is a gauge named name with help, by labels.
func gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
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

// table returns the recorder of one table, creating it on first use (recorder.For); later
// calls return the same. database names the database (server/schema, no credentials; may be
// empty). A nil *Metrics returns nil, which records nothing.
func (m *Metrics) table(database, table string) *recorder.Table {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	key := [2]string{database, table}
	if e, ok := m.tables[key]; ok {
		return e.rec
	}
	ring := &minuteRing{now: m.now}
	e := &tableEntry{rec: recorder.NewTable(&m.series, database, table, ring.add), minutes: ring}
	m.tables[key] = e
	return e.rec
}

// SentUnreplicated counts n messages stored without replication or flush, answered status.
func (m *Metrics) SentUnreplicated(status string, n int) {
	if m != nil && n > 0 {
		m.unrepl.WithLabelValues(status).Add(float64(n))
	}
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
