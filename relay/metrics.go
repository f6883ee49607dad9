package relay

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus metrics, prefixed outbox_relay_. One Metrics serves any
// number of relays (every series carries the table). A nil *Metrics records nothing.
type Metrics struct {
	published   *prometheus.CounterVec
	failed      *prometheus.CounterVec
	dead        *prometheus.CounterVec
	pending     *prometheus.GaugeVec
	oldestDue   *prometheus.GaugeVec
	publishTime *prometheus.HistogramVec
	batchTime   *prometheus.HistogramVec
	leader      *prometheus.GaugeVec
	lockLosses  *prometheus.CounterVec
	writeBacks  *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (a nil reg registers nothing,
// for tests and embedding).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_published_total", Help: "Messages acknowledged by the broker and marked sent.",
		}, []string{"table", "topic", "tag"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_failed_total", Help: "Failed publish attempts recorded for a retry (including the last one before dead).",
		}, []string{"table", "topic", "tag"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_dead_total", Help: "Messages marked dead: out of retries or never sendable.",
		}, []string{"table", "topic", "tag"}),
		pending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_pending", Help: "Rows pending or failed-will-retry (the backlog), sampled by the leader.",
		}, []string{"table"}),
		oldestDue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_oldest_due_age_seconds", Help: "Time since the oldest due row became due; grows when delivery stalls.",
		}, []string{"table"}),
		publishTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_publish_duration_seconds", Help: "Duration of one broker send (one message or one batch request).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"table"}),
		batchTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_batch_duration_seconds", Help: "Duration of one batch: publish and write-back of up to relay.batch_size rows.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"table"}),
		leader: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_leader", Help: "1 while this process holds the table's lock and publishes, else 0.",
		}, []string{"table"}),
		lockLosses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_lock_losses_total", Help: "Times the lock could not be extended and publishing stopped.",
		}, []string{"table"}),
		writeBacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_writeback_failures_total", Help: "Write-backs the database refused or did not answer; publishing pauses until one succeeds.",
		}, []string{"table"}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.failed, m.dead, m.pending, m.oldestDue, m.publishTime, m.batchTime, m.leader, m.lockLosses, m.writeBacks)
	}
	return m
}

func (m *Metrics) observePublish(table string, d time.Duration) {
	if m != nil {
		m.publishTime.WithLabelValues(table).Observe(d.Seconds())
	}
}

func (m *Metrics) observeBatch(table string, d time.Duration) {
	if m != nil {
		m.batchTime.WithLabelValues(table).Observe(d.Seconds())
	}
}

func (m *Metrics) setLeader(table string, on bool) {
	if m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.leader.WithLabelValues(table).Set(v)
	}
}

func (m *Metrics) lockLost(table string) {
	if m != nil {
		m.lockLosses.WithLabelValues(table).Inc()
	}
}

func (m *Metrics) setBacklog(table string, pending int64, oldest float64) {
	if m != nil {
		m.pending.WithLabelValues(table).Set(float64(pending))
		m.oldestDue.WithLabelValues(table).Set(oldest)
	}
}

func (m *Metrics) writeBackFailed(table string) {
	if m != nil {
		m.writeBacks.WithLabelValues(table).Inc()
	}
}

func (m *Metrics) setLockWait(table string, d time.Duration) {
	// The lock-wait gauge arrives with the metrics rework; until then the wait is logged.
	_, _ = table, d
}
