// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/relay/metrics"
)

// The metrics' types, kept here as aliases of package relay/metrics, where they live.
type (
	// Metrics is metrics.Metrics: the Prometheus metrics of every relay of a process.
	Metrics = metrics.Metrics
	// MetricsOptions is metrics.MetricsOptions: how Metrics bounds its labels.
	MetricsOptions = metrics.MetricsOptions
	// MinuteActivity is metrics.MinuteActivity: one minute's sent, failed and dead counts.
	MinuteActivity = metrics.MinuteActivity
)

// Constants of package relay/metrics.
const (
	// DefaultMaxLabelPairs is metrics.DefaultMaxLabelPairs.
	DefaultMaxLabelPairs = metrics.DefaultMaxLabelPairs
	// ActivityMinutes is metrics.ActivityMinutes.
	ActivityMinutes = metrics.ActivityMinutes
	// LabelOther is metrics.LabelOther.
	LabelOther = metrics.LabelOther
	// LabelInvalid is metrics.LabelInvalid.
	LabelInvalid = metrics.LabelInvalid
)

// NewMetrics is metrics.NewMetrics: registers the relay's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics { return metrics.NewMetrics(reg) }

// NewMetricsWith is metrics.NewMetricsWith: NewMetrics with options.
func NewMetricsWith(reg prometheus.Registerer, opts MetricsOptions) *Metrics {
	return metrics.NewMetricsWith(reg, opts)
}
