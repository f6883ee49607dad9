// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/internal/recorder"
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
	// Attempts against the unreachable broker count as failures, though they spend no retry:
	// the alert on failures without successes sees the outage.
	sent := map[string]string{"table": "local_message", "topic": "orders", "tag": "created"}
	eventually(t, 30*time.Second, "failed attempts counted", func() bool {
		return metric(t, reg, "outbox_relay_failed_total", sent) >= 10
	})
	if n := countWhere(t, b.db.DB, "retry_count = 0 AND status IN (0, 1)"); n != 10 {
		t.Fatalf("%d rows due with no retry spent, want 10", n)
	}
	if err := b.broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
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
	recorder.For(m, testDatabase, testTable)
	recorder.For(m, testDatabase, "other_outbox")
	got := samples(t, scrape(t, reg))
	for _, table := range []string{testTable, "other_outbox"} {
		lt := `database="` + testDatabase + `",table="` + table + `"`
		for _, s := range []string{
			`outbox_relay_leader{` + lt + `}`,
			`outbox_relay_lock_wait_seconds{` + lt + `}`,
			`outbox_relay_lock_losses_total{` + lt + `}`,
			`outbox_relay_writeback_failures_total{` + lt + `}`,
			`outbox_relay_pending{` + lt + `}`,
			`outbox_relay_oldest_due_age_seconds{` + lt + `}`,
			`outbox_relay_dead_rows{` + lt + `}`,
			`outbox_relay_unknown_status_rows{` + lt + `}`,
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
	// The recorder is shared, and a nil Metrics gives a nil recorder that records nothing.
	if recorder.For(m, testDatabase, testTable) != recorder.For(m, testDatabase, testTable) {
		t.Error("recorder.For returned two recorders for one table")
	}
	var none *relay.Metrics
	h := recorder.For(none, testDatabase, testTable)
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
	tm := recorder.For(m, testDatabase, testTable)
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

// readRepoFile returns a file of the repository, by its path from the root.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// promtoolOn writes doc as YAML to a temporary file and runs promtool's args on it.
func promtoolOn(t *testing.T, promtool string, doc any, args ...string) ([]byte, error) {
	t.Helper()
	raw, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "promtool.yml")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return exec.Command(promtool, append(args, file)...).CombinedOutput()
}

// promtoolPath returns the promtool that scripts/promtool.sh runs (installing it from
// Debian's package when missing). Without one the test is skipped, or fails under CI=true.
func promtoolPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", "../scripts/promtool.sh", "--path").Output()
	if err != nil {
		msg := fmt.Sprintf("promtool unavailable (scripts/promtool.sh: %v)", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return strings.TrimSpace(string(out))
}

// alertRule is one rule of deploy/prometheus/alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads deploy/prometheus/alerts.yml.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	raw := readRepoFile(t, "deploy/prometheus/alerts.yml")
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("alerts.yml has no rules")
	}
	return out
}

// fakeRelay is one relay process of a scenario: its own registry and metrics, as `run` has.
type fakeRelay struct {
	instance string
	reg      *prometheus.Registry
	tm       *recorder.Table
	tx       *txcheck.Metrics // the check responder's (rocketmq.transaction_check_groups)
	audit    *auditor.Metrics // the broker audit's
	down     bool
}

// start gives the relay a fresh registry, as a restarted process has.
func (r *fakeRelay) start() {
	r.reg = prometheus.NewRegistry()
	m := relay.NewMetricsWith(r.reg, relay.MetricsOptions{Routes: testRoutes})
	m.SetBuildInfo("v1.0.0", "abc123")
	r.tm = recorder.For(m, testDatabase, testTable)
	r.tx = txcheck.NewMetrics(r.reg, testDatabase)
	r.audit = auditor.NewMetrics(r.reg)
	r.down = false
}

// scenario drives relays minute by minute and records what Prometheus would have scraped
// from their /metrics (plus the up series Prometheus adds) as promtool input series.
type scenario struct {
	t      *testing.T
	name   string
	relays map[string]*fakeRelay
	steps  int
	values map[string][]string // series -> value per step ("" when not scraped)
	expect []alertTest
}

func newScenario(t *testing.T, name string, instances ...string) *scenario {
	s := &scenario{t: t, name: name, relays: map[string]*fakeRelay{}, values: map[string][]string{}}
	for _, in := range instances {
		r := &fakeRelay{instance: in}
		r.start()
		s.relays[in] = r
	}
	return s
}

// run calls step for each minute 0..minutes-1, then scrapes every relay.
func (s *scenario) run(minutes int, step func(minute int)) {
	for i := 0; i < minutes; i++ {
		step(i)
		s.scrape()
	}
}

func (s *scenario) scrape() {
	for _, r := range s.relays {
		target := `job="outbox-relay",instance="` + r.instance + `"`
		up := "1"
		if r.down {
			up = "0"
		}
		s.record(`up{`+target+`}`, up)
		if r.down {
			continue
		}
		for sel, v := range samples(s.t, scrape(s.t, r.reg)) {
			if i := strings.IndexByte(sel, '{'); i >= 0 {
				sel = sel[:i+1] + target + "," + sel[i+1:]
			} else {
				sel += "{" + target + "}"
			}
			s.record(sel, v)
		}
	}
	s.steps++
}

func (s *scenario) record(series, v string) {
	vs := s.values[series]
	for len(vs) < s.steps {
		vs = append(vs, "")
	}
	s.values[series] = append(vs, v)
}

// fires expects alert to fire at minute with the labels of the alerting series; quiet
// expects it not to fire.
func (s *scenario) fires(minute int, alert string, labels map[string]string) {
	s.expect = append(s.expect, alertTest{minute: minute, alert: alert, labels: []map[string]string{labels}})
}

func (s *scenario) quiet(minute int, alerts ...string) {
	for _, a := range alerts {
		s.expect = append(s.expect, alertTest{minute: minute, alert: a})
	}
}

type alertTest struct {
	minute int
	alert  string
	labels []map[string]string
}

// inputSeries renders the recorded values in promtool's notation: "_" before a series
// exists, "stale" once when it disappears (a relay went down).
func (s *scenario) inputSeries() []map[string]string {
	var names []string
	for n := range s.values {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []map[string]string
	for _, n := range names {
		vs := s.values[n]
		for len(vs) < s.steps {
			vs = append(vs, "")
		}
		notation := make([]string, len(vs))
		seen, staled := false, false
		for i, v := range vs {
			switch {
			case v != "":
				notation[i], seen, staled = v, true, false
			case seen && !staled:
				notation[i], staled = "stale", true
			default:
				notation[i] = "_"
			}
		}
		out = append(out, map[string]string{"series": n, "values": strings.Join(notation, " ")})
	}
	return out
}

// group returns the scenario as a promtool test group, expected alerts labelled and
// annotated as alerts.yml says.
func (s *scenario) group(rules map[string]alertRule) map[string]any {
	var tests []map[string]any
	for _, e := range s.expect {
		rule, ok := rules[e.alert]
		if !ok {
			s.t.Fatalf("scenario %s expects unknown alert %s", s.name, e.alert)
		}
		exp := []map[string]any{}
		for _, l := range e.labels {
			labels := map[string]string{}
			for k, v := range rule.Labels {
				labels[k] = v
			}
			for k, v := range l {
				labels[k] = v
			}
			ann := map[string]string{}
			for k, v := range rule.Annotations {
				ann[k] = labelRef.ReplaceAllStringFunc(v, func(ref string) string {
					return labels[labelRef.FindStringSubmatch(ref)[1]]
				})
			}
			exp = append(exp, map[string]any{"exp_labels": labels, "exp_annotations": ann})
		}
		tests = append(tests, map[string]any{
			"eval_time": fmt.Sprintf("%dm", e.minute), "alertname": e.alert, "exp_alerts": exp,
		})
	}
	return map[string]any{"name": s.name, "interval": "1m", "input_series": s.inputSeries(), "alert_rule_test": tests}
}

// labelRef matches the {{ $labels.name }} references of an annotation.
var labelRef = regexp.MustCompile(`\{\{\s*\$labels\.(\w+)\s*\}\}`)

// tableLabels are the labels of an alert about the test table.
var tableLabels = map[string]string{"database": testDatabase, "table": testTable}

// TestAlertsFireOnTheRelaysMetrics runs every rule of deploy/prometheus/alerts.yml through
// promtool against series scraped from real relay metrics: healthy relays (leader and
// standby) raise nothing; a fresh start, a dead message, a broker outage, a growing backlog,
// slow sends, lost locks, a missing leader and relays going down raise their alerts.
func TestAlertsFireOnTheRelaysMetrics(t *testing.T) {
	t.Parallel()
	promtool := promtoolPath(t)
	rules := map[string]alertRule{}
	var names []string
	for _, r := range alertRules(t) {
		rules[r.Alert] = r
		names = append(names, r.Alert)
	}
	var groups []map[string]any
	tested := map[string]bool{}
	add := func(s *scenario) {
		groups = append(groups, s.group(rules))
		for _, e := range s.expect {
			if len(e.labels) > 0 {
				tested[e.alert] = true
			}
		}
	}

	// Healthy: a publishes, b waits; the standby's long lock wait and zero series raise nothing.
	s := newScenario(t, "healthy leader and standby", "a", "b")
	a, b := s.relays["a"], s.relays["b"]
	s.run(40, func(m int) {
		a.tm.SetLeader(true)
		b.tm.SetLockWait(time.Duration(m) * time.Minute)
		a.tm.Published("orders", "created", 100)
		a.tm.ObservePublish(10 * time.Millisecond)
		a.tm.ObserveBatch(20 * time.Millisecond)
		for _, r := range []*fakeRelay{a, b} {
			r.tm.SetBacklog(5, 0.5)
		}
	})
	for _, m := range []int{1, 10, 30, 39} {
		s.quiet(m, names...)
	}
	add(s)

	// The leader restarts; its first dead messages after the restart, of a route pair exported
	// from zero and of a pair never seen before, raise the alert; the dead rows stay until an
	// operator acts.
	s = newScenario(t, "dead messages after a restart", "a", "b")
	a, b = s.relays["a"], s.relays["b"]
	s.run(50, func(m int) {
		switch {
		case m == 10:
			a.down = true
		case m == 11:
			a.start()
		case m == 20:
			a.tm.Dead("orders", "created", 1)
		case m == 30:
			a.tm.Dead("payments", "refund", 1)
		}
		if !a.down {
			a.tm.SetLeader(true)
		}
		deadRows := int64(0)
		if m >= 20 {
			deadRows = 2
		}
		for _, r := range []*fakeRelay{a, b} {
			if !r.down {
				r.tm.SetDeadRows(deadRows)
			}
		}
	})
	s.quiet(19, "OutboxRelayDeadMessages", "OutboxRelayDeadRows", "OutboxRelayNoLeader", "OutboxRelayDown")
	s.fires(21, "OutboxRelayDeadMessages", tableLabels)
	s.fires(31, "OutboxRelayDeadMessages", tableLabels)
	s.quiet(45, "OutboxRelayDeadMessages")
	s.quiet(22, "OutboxRelayDeadRows")
	s.fires(26, "OutboxRelayDeadRows", tableLabels)
	add(s)

	// The broker goes away for 15 minutes: sends fail, nothing succeeds, the backlog ages.
	s = newScenario(t, "broker outage", "a", "b")
	a, b = s.relays["a"], s.relays["b"]
	s.run(45, func(m int) {
		a.tm.SetLeader(true)
		pending, age := int64(3), 0.2
		if m >= 10 && m < 25 {
			a.tm.Failed("orders", "created", 500)
			pending, age = int64(100*(m-9)), float64(60*(m-9))
		} else {
			a.tm.Published("orders", "created", 100)
		}
		for _, r := range []*fakeRelay{a, b} {
			r.tm.SetBacklog(pending, age)
		}
	})
	s.quiet(12, "OutboxRelayBrokerUnreachable", "OutboxRelayBacklogAge")
	s.fires(21, "OutboxRelayBrokerUnreachable", tableLabels)
	s.fires(20, "OutboxRelayBacklogAge", tableLabels)
	s.fires(24, "OutboxRelayFailingSends", tableLabels)
	s.quiet(40, "OutboxRelayBrokerUnreachable", "OutboxRelayBacklogAge", "OutboxRelayFailingSends")
	add(s)

	// The broker refuses a topic for the relay's ACL user for ten minutes, then it is granted.
	s = newScenario(t, "a topic refused for the relay's configuration", "a")
	a = s.relays["a"]
	s.run(30, func(m int) {
		a.tm.SetLeader(true)
		a.tm.Published("orders", "created", 100)
		a.tm.SetMisconfigured("payments", m >= 10 && m < 20)
	})
	s.quiet(11, "OutboxRelayTopicMisconfigured")
	s.fires(13, "OutboxRelayTopicMisconfigured", map[string]string{"database": testDatabase, "table": testTable, "topic": "payments"})
	s.quiet(25, "OutboxRelayTopicMisconfigured")
	add(s)

	// Writers outpace a slow broker: sends take 2 s and the backlog grows.
	s = newScenario(t, "slow broker and growing backlog", "a")
	a = s.relays["a"]
	s.run(35, func(m int) {
		a.tm.SetLeader(true)
		for i := 0; i < 50; i++ {
			a.tm.ObservePublish(2 * time.Second)
		}
		a.tm.Published("orders", "created", 50)
		a.tm.SetBacklog(int64(1000*m), 1)
	})
	s.quiet(9, "OutboxRelaySlowSends", "OutboxRelayBacklogGrowing")
	s.fires(20, "OutboxRelaySlowSends", tableLabels)
	s.fires(30, "OutboxRelayBacklogGrowing", tableLabels)
	add(s)

	// The lock is lost three times in four minutes, then nobody can take it for ten.
	s = newScenario(t, "lock flapping, then nobody leads", "a", "b")
	a, b = s.relays["a"], s.relays["b"]
	leader := a
	s.run(50, func(m int) {
		switch {
		case m == 10 || m == 12 || m == 14:
			leader.tm.LockLost()
			leader.tm.SetLeader(false)
			leader = map[*fakeRelay]*fakeRelay{a: b, b: a}[leader]
		case m == 20:
			leader.tm.LockLost()
			leader.tm.SetLeader(false)
			leader = nil
		case m == 30:
			leader = a
		}
		for _, r := range []*fakeRelay{a, b} {
			r.tm.SetLeader(r == leader)
			if r != leader && m >= 20 && m < 30 {
				r.tm.SetLockWait(time.Duration(m-20) * time.Minute)
			}
		}
	})
	s.quiet(9, "OutboxRelayLockFlapping", "OutboxRelayNoLeader", "OutboxRelayLockWaitLong")
	s.fires(15, "OutboxRelayLockFlapping", tableLabels)
	s.quiet(19, "OutboxRelayNoLeader", "OutboxRelayLockWaitLong")
	s.fires(22, "OutboxRelayNoLeader", tableLabels)
	s.fires(24, "OutboxRelayLockWaitLong", tableLabels)
	s.quiet(45, "OutboxRelayLockFlapping", "OutboxRelayNoLeader", "OutboxRelayLockWaitLong")
	add(s)

	// A partitioned table: a and b hold one partition each; a stops holding its partition
	// (killed, or another relay.partitions) and b does not take it.
	s = newScenario(t, "a partition nobody holds", "a", "b")
	a, b = s.relays["a"], s.relays["b"]
	a.tm.InitPartitions(2)
	b.tm.InitPartitions(2)
	s.run(30, func(m int) {
		a.tm.SetPartitionOwned(0, m < 10)
		b.tm.SetPartitionOwned(1, true)
	})
	s.quiet(9, "OutboxRelayPartitionUnowned", "OutboxRelayNoLeader")
	s.fires(13, "OutboxRelayPartitionUnowned", map[string]string{"database": testDatabase, "table": testTable, "partition": "0"})
	s.quiet(20, "OutboxRelayNoLeader")
	add(s)

	// With a check group, relay a answers check-backs: first at their first check; then halves
	// of an open writer transaction are answered at their 7th check and later, for ten minutes.
	// Relay b's series of the group appear only then, already past 5: its first answers.
	s = newScenario(t, "transactional halves checked repeatedly", "a", "b")
	a, b = s.relays["a"], s.relays["b"]
	s.run(50, func(m int) {
		a.tm.SetLeader(true)
		a.tx.Observe("outbox-tx", txcheck.Rollback, txcheck.ReasonRelayDelivers, 1)
		if m >= 10 && m < 20 {
			a.tx.Observe("outbox-tx", txcheck.Unknown, txcheck.ReasonOpen, m-3)
		}
		if m == 35 {
			b.tx.Observe("outbox-tx", txcheck.Unknown, txcheck.ReasonOpen, 8)
		}
	})
	txLabels := map[string]string{"database": testDatabase, "group": "outbox-tx"}
	s.quiet(9, "OutboxRelayTransactionHalvesRechecked")
	s.fires(12, "OutboxRelayTransactionHalvesRechecked", txLabels)
	s.quiet(33, "OutboxRelayTransactionHalvesRechecked")
	s.fires(36, "OutboxRelayTransactionHalvesRechecked", txLabels)
	s.quiet(48, "OutboxRelayTransactionHalvesRechecked")
	add(s)

	// The audit finds every sent row present, then, after a broker's failover, three rows
	// lost, one of an ordered key: the alert fires for each kind, then goes quiet.
	s = newScenario(t, "broker lost acknowledged messages", "a")
	a = s.relays["a"]
	s.run(40, func(m int) {
		a.tm.SetLeader(true)
		rep := auditor.Report{Checked: 100, Present: 100}
		if m == 20 {
			rep = auditor.Report{Checked: 100, Present: 97, Missing: 3, Repaired: 3, RepairedOrdered: 1}
		}
		a.audit.Add(testDatabase, testTable, rep)
	})
	s.quiet(19, "OutboxRelayBrokerLostMessages")
	s.expect = append(s.expect, alertTest{minute: 21, alert: "OutboxRelayBrokerLostMessages", labels: []map[string]string{
		{"database": testDatabase, "table": testTable, "ordered": "false"},
		{"database": testDatabase, "table": testTable, "ordered": "true"},
	}})
	s.quiet(35, "OutboxRelayBrokerLostMessages")
	add(s)

	// The standby dies, then the leader: each is down, the table has nobody, then nothing
	// exports any relay series at all.
	s = newScenario(t, "relays go down", "a", "b")
	a, b = s.relays["a"], s.relays["b"]
	s.run(40, func(m int) {
		if !a.down {
			a.tm.SetLeader(true)
		}
		b.down = m >= 10
		a.down = m >= 20
	})
	s.quiet(9, "OutboxRelayDown", "OutboxRelayNoLeader", "OutboxRelayAbsent")
	s.fires(13, "OutboxRelayDown", map[string]string{"job": "outbox-relay", "instance": "b"})
	s.quiet(15, "OutboxRelayNoLeader", "OutboxRelayAbsent")
	s.fires(22, "OutboxRelayNoLeader", tableLabels)
	s.fires(30, "OutboxRelayAbsent", map[string]string{})
	add(s)

	for _, n := range names {
		if !tested[n] {
			t.Errorf("alert %s of alerts.yml is never seen firing by this test", n)
		}
	}
	rulesPath, err := filepath.Abs("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := promtoolOn(t, promtool, map[string]any{
		"rule_files": []string{rulesPath}, "evaluation_interval": "1m", "tests": groups,
	}, "test", "rules")
	if err != nil {
		t.Fatalf("promtool test rules on the scraped series: %v\n%s", err, out)
	}
}

// realSeries returns the label names of every series a relay with some traffic exports,
// by metric name (histograms by their _bucket, _sum and _count names).
func realSeries(t *testing.T) map[string]map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := relay.NewMetricsWith(reg, relay.MetricsOptions{Routes: testRoutes})
	tm := recorder.For(m, testDatabase, testTable)
	tm.InitPartitions(2) // the series of a partitioned table (relay.partitions > 1)
	tm.Published("orders", "created", 1)
	tm.ObservePublish(time.Millisecond)
	tm.SetMisconfigured("payments", true)       // a series exists only while a topic is refused
	m.ConnectionWatch("outbox-relay", true)     // a series exists once a producer group started
	tx := txcheck.NewMetrics(reg, testDatabase) // the check responder's, with check groups
	tx.Observe("outbox-tx", txcheck.Rollback, txcheck.ReasonSent, 1)
	tx.Recovered("outbox-tx")
	am := auditor.NewMetrics(reg)
	am.Add(testDatabase, testTable, auditor.Report{Checked: 1, Present: 1})
	am.SetLag(testDatabase, testTable, 0)
	out := map[string]map[string]bool{}
	for sel := range samples(t, scrape(t, reg)) {
		name, labels, _ := strings.Cut(sel, "{")
		if out[name] == nil {
			out[name] = map[string]bool{}
		}
		for _, l := range labelName.FindAllStringSubmatch(labels, -1) {
			out[name][l[1]] = true
		}
	}
	return out
}

// labelName matches the names of a series' labels, in the exposition text and in PromQL
// selectors alike.
var labelName = regexp.MustCompile(`(?:^|[{,])\s*([a-zA-Z_]\w*)\s*=~?\s*"(?:[^"\\]|\\.)*"`)

// TestShippedAlertTestsUseTheRelaysSeries runs `promtool check rules` and `promtool test
// rules` on deploy/prometheus, and checks that the hand-written input series of
// alerts_test.yml are named and labelled as the relay exports them.
func TestShippedAlertTestsUseTheRelaysSeries(t *testing.T) {
	t.Parallel()
	raw := readRepoFile(t, "deploy/prometheus/alerts_test.yml")
	var f struct {
		Tests []struct {
			InputSeries []struct {
				Series string `yaml:"series"`
			} `yaml:"input_series"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	real := realSeries(t)
	scrapeLabels := map[string]bool{"job": true, "instance": true}
	for _, g := range f.Tests {
		for _, in := range g.InputSeries {
			name, labels, _ := strings.Cut(in.Series, "{")
			if name == "up" {
				continue // added by Prometheus, not exported by the relay
			}
			want, ok := real[name]
			if !ok {
				t.Errorf("alerts_test.yml: %s is not a series of the relay's /metrics", name)
				continue
			}
			got := map[string]bool{}
			for _, l := range labelName.FindAllStringSubmatch(labels, -1) {
				if !scrapeLabels[l[1]] {
					got[l[1]] = true
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("alerts_test.yml: %s has labels %v, the relay exports %v", in.Series, got, want)
			}
		}
	}
	promtool := promtoolPath(t)
	for _, args := range [][]string{
		{"check", "rules", "../deploy/prometheus/alerts.yml"},
		{"test", "rules", "../deploy/prometheus/alerts_test.yml"},
	} {
		if out, err := exec.Command(promtool, args...).CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestGrafanaDashboardQueriesTheRelaysMetrics checks that deploy/grafana/outbox-relay.json
// parses, that every metric its queries name is a series of the relay's /metrics output and
// every variable they use is defined, and that promtool accepts every query as PromQL.
func TestGrafanaDashboardQueriesTheRelaysMetrics(t *testing.T) {
	t.Parallel()
	raw := readRepoFile(t, "deploy/grafana/outbox-relay.json")
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("outbox-relay.json does not parse: %v", err)
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	var exprs []string
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		if q, ok := v.Query.(map[string]any); ok {
			s, _ := q["query"].(string)
			if inner, ok := strings.CutPrefix(s, "label_values("); ok {
				sel, _, _ := strings.Cut(inner, ", ")
				exprs = append(exprs, sel)
			}
		}
	}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries, want its panels' queries", len(exprs))
	}
	real := realSeries(t)
	queried := map[string]bool{}
	var rules []map[string]string
	for i, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			queried[name] = true
			if real[name] == nil {
				t.Errorf("query %q names %s, which the relay does not export", e, name)
			}
		}
		for _, v := range variable.FindAllStringSubmatch(e, -1) {
			if !vars[v[1]] {
				t.Errorf("query %q uses undefined variable $%s", e, v[1])
			}
		}
		promql := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h",
			"$database", ".*", "$table", ".*").Replace(e)
		rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query_%d", i), "expr": promql})
	}
	for _, want := range []string{"outbox_relay_pending", "outbox_relay_oldest_due_age_seconds",
		"outbox_relay_published_total", "outbox_relay_failed_total", "outbox_relay_dead_total",
		"outbox_relay_dead_rows", "outbox_relay_leader", "outbox_relay_publish_duration_seconds_bucket"} {
		if !queried[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
	promtool := promtoolPath(t)
	doc := map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}}
	if out, err := promtoolOn(t, promtool, doc, "check", "rules"); err != nil {
		t.Errorf("promtool rejects a dashboard query: %v\n%s", err, out)
	}
}

// metricName and variable find the relay metrics and the Grafana variables of a query.
var (
	metricName = regexp.MustCompile(`\boutbox_relay_\w+`)
	variable   = regexp.MustCompile(`\$(\w+)`)
)

// TestMetricsDocMatchesTheRelay keeps docs/metrics.md true: its table lists exactly the
// metrics the relay exports, with their labels and types; it includes alerts.yml verbatim and
// explains every alert; it states the label budget in force.
func TestMetricsDocMatchesTheRelay(t *testing.T) {
	t.Parallel()
	raw := readRepoFile(t, "docs/metrics.md")
	doc := string(raw)
	reg := prometheus.NewRegistry()
	m := relay.NewMetricsWith(reg, relay.MetricsOptions{Routes: testRoutes})
	m.ConnectionWatch("outbox-relay", true) // a series exists once a producer group started
	tm := recorder.For(m, testDatabase, testTable)
	tm.InitPartitions(2)
	tm.SetMisconfigured("payments", true) // a series exists only while a topic is refused
	am := auditor.NewMetrics(reg)
	am.Add(testDatabase, testTable, auditor.Report{Checked: 1, Present: 1})
	am.SetLag(testDatabase, testTable, 0)
	text := scrape(t, reg)
	types := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			fields := strings.Fields(f)
			types[fields[0]] = fields[1]
		}
	}
	real := realSeries(t)
	documented := map[string]bool{}
	row := regexp.MustCompile("(?m)^\\| `(outbox_relay_\\w+)` \\| (\\w+) \\| ([\\w, ]+) \\|")
	for _, m := range row.FindAllStringSubmatch(doc, -1) {
		name, typ, labels := m[1], m[2], strings.Split(m[3], ", ")
		documented[name] = true
		if types[name] == "" {
			t.Errorf("docs/metrics.md lists %s, which the relay does not export", name)
			continue
		}
		if typ != types[name] {
			t.Errorf("docs/metrics.md: %s is a %s, the doc says %s", name, types[name], typ)
		}
		series := name
		if typ == "histogram" {
			series += "_count"
		}
		sort.Strings(labels)
		var want []string
		for l := range real[series] {
			want = append(want, l)
		}
		sort.Strings(want)
		if fmt.Sprint(labels) != fmt.Sprint(want) {
			t.Errorf("docs/metrics.md: %s has labels %v, the relay exports %v", name, labels, want)
		}
	}
	for name := range types {
		if !documented[name] {
			t.Errorf("docs/metrics.md does not list %s", name)
		}
	}
	alerts := readRepoFile(t, "deploy/prometheus/alerts.yml")
	included := "<!-- begin deploy/prometheus/alerts.yml -->\n```yaml\n" + string(alerts) + "```\n<!-- end deploy/prometheus/alerts.yml -->"
	if !strings.Contains(doc, included) {
		t.Error("docs/metrics.md does not include deploy/prometheus/alerts.yml verbatim between its markers")
	}
	for _, r := range alertRules(t) {
		if !strings.Contains(doc, "| `"+r.Alert+"` | "+r.Labels["severity"]+" |") {
			t.Errorf("docs/metrics.md's alert table has no row for %s (severity %s)", r.Alert, r.Labels["severity"])
		}
	}
	// Every runbook link of the doc and of the rules names a section of docs/runbook.md.
	slugs := map[string]bool{}
	for _, line := range strings.Split(string(readRepoFile(t, "docs/runbook.md")), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			slug := strings.ReplaceAll(strings.ToLower(h), " ", "-")
			slugs[regexp.MustCompile(`[^a-z0-9_-]`).ReplaceAllString(slug, "")] = true
		}
	}
	for _, m := range regexp.MustCompile(`runbook\.md#([\w-]+)`).FindAllStringSubmatch(doc, -1) {
		if !slugs[m[1]] {
			t.Errorf("docs/metrics.md or alerts.yml links runbook.md#%s, which is no section of docs/runbook.md", m[1])
		}
	}
	if budget := fmt.Sprintf("The first %d other topic and tag pairs", relay.DefaultMaxLabelPairs); !strings.Contains(doc, budget) {
		t.Errorf("docs/metrics.md does not say %q", budget)
	}
}

// TestStandbyExportsItsTable runs a leader and a standby of one table, each with its own
// registry as two processes have: the standby exports the table's series too (leader 0, its
// growing lock wait, counters at 0, the true backlog, dead rows and rows of unknown status),
// labelled by database.
func TestStandbyExportsItsTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	table := map[string]string{"database": "db.example:3306/shop", "table": "local_message"}
	b.insert(t, outbox.Message{Topic: "orders", Tag: "created", Body: []byte("x")})
	// A plain-SQL writer's row with a topic RocketMQ refuses: it goes dead at once.
	if _, err := b.db.DB.Exec(`INSERT INTO local_message (msg_id, topic, tag, content) VALUES ('bad-1', 'no such topic!', 'order-42', 'x')`); err != nil {
		t.Fatal(err)
	}
	// A row of a status outside the contract: never sent, counted by both relays' gauge.
	if _, err := b.db.DB.Exec(`INSERT INTO local_message (msg_id, topic, tag, content, status) VALUES ('odd-1', 'orders', 'created', 'x', 9)`); err != nil {
		t.Fatal(err)
	}
	for i, reg := range regs {
		cfg := b.config()
		cfg.Database = table["database"]
		cfg.Metrics = relay.NewMetrics(reg)
		run(t, b.newRelay(t, cfg))
		if i == 0 {
			eventually(t, 30*time.Second, "the first relay leads", func() bool {
				return metric(t, reg, "outbox_relay_leader", table) == 1
			})
		}
	}
	leader, standby := regs[0], regs[1]
	dead := map[string]string{"database": table["database"], "table": "local_message", "topic": relay.LabelInvalid, "tag": "order-42"}
	sent := map[string]string{"database": table["database"], "table": "local_message", "topic": "orders", "tag": "created"}
	eventually(t, 30*time.Second, "the leader's counters and both relays' gauges", func() bool {
		return metric(t, leader, "outbox_relay_dead_total", dead) == 1 &&
			metric(t, leader, "outbox_relay_published_total", sent) == 1 &&
			metric(t, leader, "outbox_relay_dead_rows", table) == 1 &&
			metric(t, standby, "outbox_relay_dead_rows", table) == 1 &&
			metric(t, leader, "outbox_relay_unknown_status_rows", table) == 1 &&
			metric(t, standby, "outbox_relay_unknown_status_rows", table) == 1 &&
			metric(t, standby, "outbox_relay_pending", table) == 0 &&
			metric(t, standby, "outbox_relay_lock_wait_seconds", table) > 0
	})
	for _, name := range []string{"outbox_relay_leader", "outbox_relay_lock_losses_total", "outbox_relay_oldest_due_age_seconds"} {
		if v := metric(t, standby, name, table); v != 0 {
			t.Errorf("standby: %s = %v, want 0", name, v)
		}
	}
	if v := metric(t, standby, "outbox_relay_publish_duration_seconds", table); v != 0 {
		t.Errorf("standby: publish histogram has %v samples, want an empty one", v)
	}
	if v := metric(t, leader, "outbox_relay_lock_wait_seconds", table); v != 0 {
		t.Errorf("leader: lock wait %v, want 0", v)
	}
	if v := metric(t, leader, "outbox_relay_build_info", nil); v != 1 {
		t.Errorf("build info %v, want 1", v)
	}
}
