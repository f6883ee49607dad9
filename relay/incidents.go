package relay

import (
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rs/zerolog"
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

	mu          sync.Mutex
	recent      map[string][]time.Time // broker -> transient failures within incidentWindow
	failing     map[string]*brokerState
	lastSuccess time.Time
	goodTopics  map[string]time.Time // topic -> last acknowledged send
}

type brokerState struct {
	since  time.Time
	rounds int
	last   string
}

func newIncidents(log zerolog.Logger) *incidents {
	return &incidents{
		log:        log,
		recent:     map[string][]time.Time{},
		failing:    map[string]*brokerState{},
		goodTopics: map[string]time.Time{},
	}
}

// success records an acknowledged send of topic.
func (in *incidents) success(topic string) {
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	in.lastSuccess = now
	if len(in.goodTopics) < 10000 {
		in.goodTopics[topic] = now
	} else if _, ok := in.goodTopics[topic]; ok {
		in.goodTopics[topic] = now
	}
}

// brokerKey names the source of a failure: the broker's address, or the cluster as a whole
// when the failure came before a broker was chosen (no name server, no route).
func brokerKey(err error) string {
	if b := BrokerOf(err); b != "" {
		return b
	}
	return "cluster"
}

// judge turns the page's failed results into counted retries or deferrals (see Publisher for
// the policy) and updates the brokers' states.
func (in *incidents) judge(items []item, results []result) {
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()

	// Record first, so that failures arriving together in one page see each other.
	pageFailures := map[string]int{}
	for i := range results {
		if results[i].kind != failed {
			continue
		}
		err := results[i].err
		if IsRefused(err) || errors.Is(err, ErrTopicNotFound) {
			continue
		}
		k := brokerKey(err)
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
	clusterHealthy := !in.lastSuccess.IsZero() && now.Sub(in.lastSuccess) < incidentWindow

	for i := range results {
		res := &results[i]
		if res.kind != failed {
			continue
		}
		err := res.err
		k := brokerKey(err)
		switch {
		case IsRefused(err):
			res.kind = retry // the broker read this message and refused it
		case errors.Is(err, ErrTopicNotFound):
			// The topic's own problem while the cluster delivers other topics; when nothing is
			// delivered at all, an empty route table may mean no broker is alive: wait.
			topic := items[i].msg.Topic
			_, topicWorked := in.goodTopics[topic]
			if clusterHealthy && !topicWorked {
				res.kind = retry
			} else {
				res.kind = deferred
				res.delay = in.deferDelay(k, err, now)
			}
		case errors.Is(err, ErrBrokerUnreachable):
			res.kind = deferred
			res.delay = in.deferDelay(k, err, now)
		case len(in.recent[k]) >= 2:
			res.kind = deferred // an incident of the broker: not this message's fault
			res.delay = in.deferDelay(k, err, now)
		default:
			// The only failure of a broker that is otherwise fine: counted, so its backoff
			// grows, but a transient failure never makes a message dead.
			res.kind = retry
			res.capped = true
		}
		if res.kind == deferred {
			res.reason = res.reason + " (broker incident: attempt not counted)"
		}
	}
	// A broker that fails everything backs off further with each page; one that still
	// acknowledges some sends (a share of busy answers) keeps the shortest deferral. A page
	// with acknowledged sends and no failure of a failing broker ends its incident.
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
		}
	}
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
