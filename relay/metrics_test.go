package relay_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// metric returns the value of the series of name whose labels include want, or -1.
func metric(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return -1
}

func TestMetricsFollowTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	cfg := b.config()
	cfg.Metrics = relay.NewMetrics(reg)
	table := map[string]string{"table": "local_message"}
	b.broker.StopBroker() // nothing can be sent: the backlog stays
	for i := 0; i < 10; i++ {
		b.insert(t, outbox.Message{Topic: "orders", Tag: "created", Body: []byte("x")})
	}
	run(t, b.newRelay(t, cfg))
	eventually(t, 30*time.Second, "leader gauge and backlog gauges", func() bool {
		return metric(t, reg, "outbox_relay_leader", table) == 1 &&
			metric(t, reg, "outbox_relay_pending", table) == 10 &&
			metric(t, reg, "outbox_relay_oldest_due_age_seconds", table) > 0
	})
	if err := b.broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	sent := map[string]string{"table": "local_message", "topic": "orders", "tag": "created"}
	eventually(t, 60*time.Second, "published counter and an empty backlog", func() bool {
		return metric(t, reg, "outbox_relay_published_total", sent) == 10 &&
			metric(t, reg, "outbox_relay_pending", table) == 0 &&
			metric(t, reg, "outbox_relay_oldest_due_age_seconds", table) == 0
	})
	if n := metric(t, reg, "outbox_relay_publish_duration_seconds", table); n < 1 {
		t.Fatalf("publish duration histogram has %v samples", n)
	}
	if v := metric(t, reg, "outbox_relay_dead_total", sent); v > 0 {
		t.Fatalf("dead counter %v, want none", v)
	}
}
