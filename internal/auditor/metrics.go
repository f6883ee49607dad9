// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the auditor's Prometheus series, labelled by database and table. One Metrics
// serves every table of a process.
type Metrics struct {
	checked, missing, unknown *prometheus.CounterVec
	corrupt                   *prometheus.CounterVec
	repaired                  *prometheus.CounterVec
	lag                       *prometheus.GaugeVec
}

// NewMetrics registers the auditor's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	byTable := []string{"database", "table"}
	m := &Metrics{
		checked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_audit_checked_total", Help: "Sent rows the broker audit checked against the broker.",
		}, byTable),
		missing: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_audit_missing_total", Help: "Sent rows the broker acknowledged and no longer holds, as the audit found them.",
		}, byTable),
		repaired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_audit_repaired_total", Help: "Rows lost by the broker that the audit made due again; ordered=\"true\" for rows of ordered routes with a sharding key.",
		}, []string{"database", "table", "ordered"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_audit_unknown_total", Help: "Sent rows the broker could not answer for (unreachable, past retention, lookup not served); never repaired.",
		}, byTable),
		corrupt: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_relay_audit_corrupt_entries_total", Help: "Entries of the stored-position journal that did not decode: their rows are not checked, the entries are passed.",
		}, byTable),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outbox_relay_audit_lag_seconds", Help: "Age of the oldest sent row the audit has still to check (0 when it is caught up or not running here).",
		}, byTable),
	}
	if reg != nil {
		reg.MustRegister(m.checked, m.missing, m.repaired, m.unknown, m.corrupt, m.lag)
	}
	return m
}

// Add counts what an audit round of table found.
func (m *Metrics) Add(db, table string, r Report) {
	if m == nil {
		return
	}
	m.checked.WithLabelValues(db, table).Add(float64(r.Checked))
	m.missing.WithLabelValues(db, table).Add(float64(r.Missing))
	m.unknown.WithLabelValues(db, table).Add(float64(r.Unknown))
	m.corrupt.WithLabelValues(db, table).Add(float64(r.Corrupt))
	m.repaired.WithLabelValues(db, table, strconv.FormatBool(false)).Add(float64(r.Repaired - r.RepairedOrdered))
	m.repaired.WithLabelValues(db, table, strconv.FormatBool(true)).Add(float64(r.RepairedOrdered))
}

// SetLag sets the audit lag of table: the age of the oldest sent row still to check.
func (m *Metrics) SetLag(db, table string, seconds float64) {
	if m != nil {
		m.lag.WithLabelValues(db, table).Set(seconds)
	}
}
