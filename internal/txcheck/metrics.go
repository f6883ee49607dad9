// SPDX-License-Identifier: Apache-2.0

package txcheck

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the responder's series (documented in docs/transactional.md). A Responder
// registers its own; NewMetrics also serves the tests of the alerts built on them.
type Metrics struct {
	answers   *prometheus.CounterVec
	times     *prometheus.HistogramVec
	brokers   prometheus.Gauge
	recovered *prometheus.CounterVec
	dropped   *prometheus.CounterVec
}

// NewMetrics creates the series, labelled with database, and registers them with reg when
// it is not nil.
func NewMetrics(reg prometheus.Registerer, database string) *Metrics {
	constLabels := prometheus.Labels{"database": database}
	m := &Metrics{
		answers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_transaction_checks_total", Help: "Transactional check-backs answered, by group, answer (commit, rollback, unknown) and reason.",
			ConstLabels: constLabels,
		}, []string{"group", "answer", "reason"}),
		times: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outbox_relay_transaction_check_times", Help: "TRANSACTION_CHECK_TIMES of the check-backs answered: how many times the broker had checked the half, this one included.",
			ConstLabels: constLabels, Buckets: []float64{1, 2, 3, 5, 10, 15},
		}, []string{"group"}),
		brokers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "outbox_relay_transaction_check_brokers", Help: "Master brokers the check groups are registered with now.",
			ConstLabels: constLabels,
		}),
		recovered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_transaction_halves_recovered_total", Help: "Handed rows made pending again because the broker discarded their half (TRANS_CHECK_MAX_TIME_TOPIC): the relay sends them.",
			ConstLabels: constLabels,
		}, []string{"group"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_transaction_checks_dropped_total", Help: "Check-backs dropped unanswered, by reason (foreign_group, unreadable, queue_full).",
			ConstLabels: constLabels,
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.answers, m.times, m.brokers, m.recovered, m.dropped)
	}
	return m
}

// Observe counts one check answered for group, with its TRANSACTION_CHECK_TIMES.
func (m *Metrics) Observe(group string, a Answer, reason string, times int) {
	m.answers.WithLabelValues(group, a.String(), reason).Inc()
	m.times.WithLabelValues(group).Observe(float64(times))
}

// Recovered counts one handed row of group made pending because its half was discarded.
func (m *Metrics) Recovered(group string) { m.recovered.WithLabelValues(group).Inc() }

// Dropped counts one check-back dropped unanswered, for reason.
func (m *Metrics) Dropped(reason string) { m.dropped.WithLabelValues(reason).Inc() }
