// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// incidentWindow is how far back transient failures of one broker are counted together: two
// or more within it are an incident of that broker, which no message pays for.
const incidentWindow = 10 * time.Second

// Deferral of rows whose attempt failed in an incident: the broker's backoff, doubling from
// deferBase per page in which nothing was acknowledged, up to deferMax, with ±25 % jitter so that a recovering broker
// is not hit by every deferred row at the same moment.
const (
	deferBase = 500 * time.Millisecond
	deferMax  = 30 * time.Second
)

// incidents judges failed sends: a failure counts against its message only when it singles
// the message out. It remembers, per broker, the recent transient failures and how long
// the broker has been failing, and logs one line when a broker starts and stops failing.
type incidents struct {
	log zerolog.Logger

	mu         sync.Mutex
	recent     map[string][]time.Time // broker -> transient failures within incidentWindow
	failing    map[string]*brokerState
	goodTopics map[string]time.Time // topic -> last acknowledged send

	missing       map[string]time.Time    // topic -> first seen without a route
	misconfigured map[string]*brokerState // topic -> refused for the relay's configuration
	metrics       *TableMetrics
	now           func() time.Time // the relay's clock
}

type brokerState struct {
	since  time.Time
	rounds int
	last   string
	// For a misconfigured topic: when its next probe may go, and since when one is out.
	probeAt, probing time.Time
}

func newIncidents(log zerolog.Logger, metrics *TableMetrics, now func() time.Time) *incidents {
	return &incidents{
		now:           now,
		log:           log,
		recent:        map[string][]time.Time{},
		failing:       map[string]*brokerState{},
		goodTopics:    map[string]time.Time{},
		missing:       map[string]time.Time{},
		misconfigured: map[string]*brokerState{},
		metrics:       metrics,
	}
}

// success records an acknowledged send of topic.
func (in *incidents) success(topic string) {
	now := in.now()
	in.mu.Lock()
	defer in.mu.Unlock()
	delete(in.missing, topic)
	if st, ok := in.misconfigured[topic]; ok {
		delete(in.misconfigured, topic)
		in.metrics.SetMisconfigured(topic, false)
		in.log.Info().Str("topic", topic).Float64("refused_s", now.Sub(st.since).Seconds()).Msg("topic accepted again: its rows are sent")
	}
	if len(in.goodTopics) < 10000 {
		in.goodTopics[topic] = now
	} else if _, ok := in.goodTopics[topic]; ok {
		in.goodTopics[topic] = now
	}
}

// brokerKey names the source of a failure: the broker's address, or the cluster as a whole
// when the failure came before a broker was chosen (no name server, no route).
func brokerKey(err error) string {
	if b := message.BrokerOf(err); b != "" {
		return b
	}
	return "cluster"
}

// deferredMark ends the reason of a row deferred by a broker's incident; the rows carrying it
// are brought forward when the broker recovers (outboxsql.Store.HastenDeferred).
const deferredMark = " (broker incident: attempt not counted)"

// misconfiguredMark ends the reason of a row of a topic refused for the relay's configuration.
const misconfiguredMark = " (refused for the relay's configuration: attempt not counted)"

// topicMissingGrace is how long a topic must have been without a route before its attempts
// count. A broker that shuts down takes its topics' routes off the name servers; a topic that
// only lived there looks missing until the broker is back, and a short restart must not kill
// its rows. A topic this process has delivered before never counts (it is an outage).
const topicMissingGrace = incidentWindow

// judge turns the page's failed results into counted retries or deferrals by the kind of
// their error (SendErrorKind; the table in docs/decisions.md, "Failure accounting") and
// updates the brokers' and topics' states. It reports whether a broker's incident ended
// with this page: the rows it deferred may be tried again now.
func (in *incidents) judge(items []item, results []result) (recovered bool) {
	now := in.now()
	in.mu.Lock()
	defer in.mu.Unlock()

	// Record first, so that failures arriving together in one page see each other.
	pageFailures := in.record(results, now)
	for i := range results {
		if results[i].kind == failed {
			in.decide(&results[i], items[i].msg.Topic, now)
		}
	}
	return in.endRounds(results, pageFailures, now)
}

// record notes the page's transient and unreachable failures per broker, forgets those
// older than incidentWindow, and returns the page's count per broker. Caller holds mu.
func (in *incidents) record(results []result, now time.Time) map[string]int {
	pageFailures := map[string]int{}
	for i := range results {
		if results[i].kind != failed {
			continue
		}
		if k := message.KindOf(results[i].err); k != message.SendTransient && k != message.SendUnreachable {
			continue
		}
		k := brokerKey(results[i].err)
		in.recent[k] = append(in.recent[k], now)
		pageFailures[k]++
	}
	for k, ts := range in.recent {
		cut := 0
		for cut < len(ts) && now.Sub(ts[cut]) > incidentWindow {
			cut++
		}
		if cut == len(ts) {
			delete(in.recent, k)
		} else {
			in.recent[k] = ts[cut:]
		}
	}
	return pageFailures
}

// decide turns one failed result of topic into a counted retry or a deferral by its
// error's kind. Caller holds mu.
func (in *incidents) decide(res *result, topic string, now time.Time) {
	err := res.err
	k := brokerKey(err)
	switch message.KindOf(err) {
	case message.SendRefused, message.SendUnreplicated:
		res.kind = retry // the broker read this message and refused it, or did not replicate it
	case message.SendTopicMissing:
		in.decideTopicMissing(res, topic, k, now)
	case message.SendMisconfigured:
		res.kind = deferred
		res.delay = in.misconfiguredDelay(topic, err, now)
		res.reason += misconfiguredMark
	case message.SendUnreachable:
		in.deferForBroker(res, k, now)
	default:
		if len(in.recent[k]) >= 2 {
			in.deferForBroker(res, k, now) // an incident of the broker: not this message's fault
			return
		}
		// The only failure of a broker that is otherwise fine: counted, so its backoff
		// grows, but a transient failure never makes a message dead.
		res.kind = retry
		res.capped = true
	}
}

// deferForBroker defers res by broker k's backoff, costing the row no attempt.
func (in *incidents) deferForBroker(res *result, k string, now time.Time) {
	res.kind = deferred
	res.delay = in.deferDelay(k, res.err, now)
	res.reason += deferredMark
}

// decideTopicMissing judges a send whose topic has no route: not counted for the first
// topicMissingGrace the topic is seen so, nor ever for a topic this process delivered
// before (its brokers left: an outage); counted otherwise. Caller holds mu.
func (in *incidents) decideTopicMissing(res *result, topic, k string, now time.Time) {
	since, seen := in.missing[topic]
	if !seen {
		since = now
		in.missing[topic] = now
		in.log.Warn().Str("topic", topic).Err(res.err).
			Msg("topic has no route on the name servers: its rows end dead after their retries unless it appears (create it where autoCreateTopicEnable=false)")
	}
	_, delivered := in.goodTopics[topic]
	switch {
	case !delivered && now.Sub(since) >= topicMissingGrace:
		res.kind = retry // the topic's own problem: counted, dead after its retries
	case delivered:
		in.deferForBroker(res, k, now)
	default:
		res.kind = deferred
		res.delay = time.Duration(float64(time.Second) * (0.75 + 0.5*rand.Float64()))
		res.reason += " (no route yet: attempt not counted)"
	}
}

// endRounds updates the failing brokers after a page: one that fails everything backs off
// further with each page; one that still acknowledges some sends (a share of busy answers)
// keeps the shortest deferral. A page with acknowledged sends and no failure of a failing
// broker ends its incident; it reports whether one ended. Caller holds mu.
func (in *incidents) endRounds(results []result, pageFailures map[string]int, now time.Time) (recovered bool) {
	pageSent := 0
	for i := range results {
		if results[i].kind == sent {
			pageSent++
		}
	}
	for k := range pageFailures {
		if st := in.failing[k]; st != nil {
			if pageSent > 0 {
				st.rounds = 0
			} else {
				st.rounds++
			}
		}
	}
	for k, st := range in.failing {
		if pageFailures[k] == 0 && pageSent > 0 {
			in.log.Info().Str("broker", k).Float64("failing_s", now.Sub(st.since).Seconds()).Msg("broker recovered")
			delete(in.failing, k)
			recovered = true
		}
	}
	return recovered
}

// misconfiguredDelay returns how long a row of topic waits after a refusal of the relay's
// configuration: as long as the topic has been refused (at least deferBase, at most
// deferMax), so that its sends back off exponentially however its rows fall into pages. It
// reports the topic (an error line, the metric) when it was not refused before. Caller
// holds mu.
func (in *incidents) misconfiguredDelay(topic string, err error, now time.Time) time.Duration {
	st := in.misconfigured[topic]
	if st == nil {
		st = &brokerState{since: now}
		in.misconfigured[topic] = st
		in.metrics.SetMisconfigured(topic, true)
		in.log.Error().Str("topic", topic).Err(err).
			Msg("sends of this topic are refused for the relay's configuration (ACL permission or credentials, topic type, proxy): its rows wait and none goes dead; fix the configuration")
	}
	st.last = err.Error()
	d := min(max(now.Sub(st.since), deferBase), deferMax)
	st.probeAt, st.probing = now.Add(d), time.Time{}
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// probeLost is how long a misconfigured topic's probe may be out before another may go: a
// probe abandoned (a shutdown, a handover) is never judged.
const probeLost = time.Minute

// holdMisconfigured decides for a row of topic about to be sent: while the broker refuses
// the topic for the relay's configuration, one row at a time probes it, when its backoff has
// run out; the others are not sent but wait (the delay returned, and the last refusal), so
// that a refused topic costs the broker one send per backoff whatever its backlog.
func (in *incidents) holdMisconfigured(topic string, now time.Time) (time.Duration, string, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	st := in.misconfigured[topic]
	if st == nil {
		return 0, "", false
	}
	if !now.Before(st.probeAt) && (st.probing.IsZero() || now.Sub(st.probing) > probeLost) {
		st.probing = now
		return 0, "", false // this row is the probe
	}
	wait := max(st.probeAt.Sub(now), deferBase)
	return time.Duration(float64(wait) * (1 + 0.25*rand.Float64())), st.last, true
}

// deferDelay returns how long a row deferred by broker k's incident waits, and opens the
// incident (one log line) when k was healthy. Caller holds mu.
func (in *incidents) deferDelay(k string, err error, now time.Time) time.Duration {
	st := in.failing[k]
	if st == nil {
		st = &brokerState{since: now}
		in.failing[k] = st
		in.log.Warn().Str("broker", k).Err(err).Msg("broker failing: attempts are deferred and not counted until it recovers")
	}
	st.last = err.Error()
	d := deferBase << min(st.rounds, 10)
	d = min(d, deferMax)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// failingBrokers returns the brokers in an incident now and since when.
func (in *incidents) failingBrokers() map[string]time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]time.Time, len(in.failing))
	for k, st := range in.failing {
		out[k] = st.since
	}
	return out
}

// misconfiguredTopics returns the topics refused for the relay's configuration now, with the
// last refusal.
func (in *incidents) misconfiguredTopics() map[string]string {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]string, len(in.misconfigured))
	for t, st := range in.misconfigured {
		out[t] = st.last
	}
	return out
}
