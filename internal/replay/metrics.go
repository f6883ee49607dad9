// SPDX-License-Identifier: Apache-2.0

package replay

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts replays: outbox_relay_replay_messages_total (copies the broker
// acknowledged), outbox_relay_replay_skipped_total (rows that could not be sent as they are)
// and outbox_relay_replay_runs_total (runs ended, by outcome), each by source ("cli",
// "dashboard"). A nil *Metrics counts nothing.
type Metrics struct {
	messages *prometheus.CounterVec
	skips    *prometheus.CounterVec
	runs     *prometheus.CounterVec
}

// NewMetrics registers the replay counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_relay_replay_messages_total",
			Help: "Replayed copies of sent rows that the broker acknowledged, by source (cli, dashboard)."}, []string{"source"}),
		skips: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_relay_replay_skipped_total",
			Help: "Selected rows a replay could not send as they are (malformed, no route), by source."}, []string{"source"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outbox_relay_replay_runs_total",
			Help: "Replay runs ended, by source and outcome (done, failed)."}, []string{"source", "outcome"}),
	}
	reg.MustRegister(m.messages, m.skips, m.runs)
	return m
}

func (m *Metrics) sent(source string, n int) {
	if m != nil {
		m.messages.WithLabelValues(source).Add(float64(n))
	}
}

func (m *Metrics) skipped(source string) {
	if m != nil {
		m.skips.WithLabelValues(source).Inc()
	}
}

func (m *Metrics) run(source, outcome string) {
	if m != nil {
		m.runs.WithLabelValues(source, outcome).Inc()
	}
}
