package relay_test

import (
	"fmt"
	"net/http/httptest"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

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

const (
	testDatabase = "127.0.0.1:3306/shop"
	testTable    = "local_message"
)

// testRoutes are the routes the metrics tests configure: one literal pair, one topic with any tag.
var testRoutes = []relay.PatternRule{{Topic: "orders", Tag: "created"}, {Topic: "payments", Tag: "*"}}

// scrape returns the /metrics text of reg, as the relay's HTTP handler serves it.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// samples parses the text format into series selector -> value (no timestamps are written).
func samples(t *testing.T, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("unparsable /metrics line %q", line)
		}
		out[line[:i]] = line[i+1:]
	}
	return out
}

// families returns the metric names of a /metrics text, with histogram series folded into
// their family name.
func families(text string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out[strings.Fields(f)[0]] = true
		}
	}
	return out
}

func TestMetricsExportEverySeriesFromZero(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := relay.NewMetricsWith(reg, relay.MetricsOptions{Routes: testRoutes})
	m.SetBuildInfo("v1.2.3", "abc123")
	m.Table(testDatabase, testTable)
	m.Table(testDatabase, "other_outbox")
	got := samples(t, scrape(t, reg))
	for _, table := range []string{testTable, "other_outbox"} {
		lt := `database="` + testDatabase + `",table="` + table + `"`
		for _, s := range []string{
			`outbox_relay_leader{` + lt + `}`,
			`outbox_relay_lock_wait_seconds{` + lt + `}`,
			`outbox_relay_lock_losses_total{` + lt + `}`,
			`outbox_relay_pending{` + lt + `}`,
			`outbox_relay_oldest_due_age_seconds{` + lt + `}`,
			`outbox_relay_dead_rows{` + lt + `}`,
			`outbox_relay_publish_duration_seconds_count{` + lt + `}`,
			`outbox_relay_batch_duration_seconds_count{` + lt + `}`,
			`outbox_relay_published_total{` + lt + `,tag="created",topic="orders"}`,
			`outbox_relay_failed_total{` + lt + `,tag="created",topic="orders"}`,
			`outbox_relay_dead_total{` + lt + `,tag="created",topic="orders"}`,
		} {
			if v, ok := got[s]; !ok || v != "0" {
				t.Errorf("%s = %q (exported %v), want 0 before any event", s, v, ok)
			}
		}
	}
	want := `outbox_relay_build_info{commit="abc123",goversion="` + runtime.Version() + `",version="v1.2.3"}`
	if got[want] != "1" || len(selectorsOf(got, "outbox_relay_build_info")) != 1 {
		t.Errorf("build info: want only %s 1, got %v", want, selectorsOf(got, "outbox_relay_build_info"))
	}
	// The handle is shared, and a nil Metrics gives a nil handle that records nothing.
	if m.Table(testDatabase, testTable) != m.Table(testDatabase, testTable) {
		t.Error("Table returned two handles for one table")
	}
	var none *relay.Metrics
	h := none.Table(testDatabase, testTable)
	h.Published("orders", "created", 1)
	h.Failed("orders", "created", 1)
	h.Dead("orders", "created", 1)
	h.ObservePublish(time.Millisecond)
	h.ObserveBatch(time.Millisecond)
	h.SetLeader(true)
	h.LockLost()
	h.SetBacklog(1, 1)
	h.SetDeadRows(1)
	h.SetLockWait(time.Second)
	none.SetBuildInfo("v", "c")
}

// selectorsOf returns the series of one metric name in got.
func selectorsOf(got map[string]string, name string) []string {
	var out []string
	for s := range got {
		if s == name || strings.HasPrefix(s, name+"{") {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func TestMetricsLabelsAreBounded(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := relay.NewMetricsWith(reg, relay.MetricsOptions{Routes: testRoutes, MaxLabelPairs: 3})
	tm := m.Table(testDatabase, testTable)
	tm.Dead("bad topic!", "x", 1)            // a garbage topic of a dead row: "_invalid"
	tm.Dead(strings.Repeat("t", 300), "", 1) // too long for a topic: "_invalid" too
	tm.Published("stock", "reserved", 1)     // third pair: the budget is spent
	for i := 1; i <= 1000; i++ {             // order numbers in tags of a configured topic
		tm.Published("orders", fmt.Sprintf("order-%d", i), 1)
	}
	for i := 0; i < 1000; i++ { // topics never seen before
		tm.Published(fmt.Sprintf("junk-%d", i), "", 1)
	}
	tm.Published("payments", "paid", 2) // a route's literal topic keeps its label
	tm.Published("orders", "created", 5)
	got := samples(t, scrape(t, reg))
	lt := `database="` + testDatabase + `",table="` + testTable + `"`
	want := map[string]string{
		`outbox_relay_dead_total{` + lt + `,tag="x",topic="_invalid"}`:           "1",
		`outbox_relay_dead_total{` + lt + `,tag="",topic="_invalid"}`:            "1",
		`outbox_relay_published_total{` + lt + `,tag="reserved",topic="stock"}`:  "1",
		`outbox_relay_published_total{` + lt + `,tag="_other",topic="orders"}`:   "1000",
		`outbox_relay_published_total{` + lt + `,tag="_other",topic="_other"}`:   "1000",
		`outbox_relay_published_total{` + lt + `,tag="_other",topic="payments"}`: "2",
		`outbox_relay_published_total{` + lt + `,tag="created",topic="orders"}`:  "5",
	}
	for s, v := range want {
		if got[s] != v {
			t.Errorf("%s = %q, want %s", s, got[s], v)
		}
	}
	if n := len(selectorsOf(got, "outbox_relay_published_total")); n != 7 {
		t.Errorf("%d published series, want 7 (3 admitted pairs, 1 route pair, 3 overflow pairs): %v", n,
			selectorsOf(got, "outbox_relay_published_total"))
	}
}
