package relay

import (
	"context"
	"errors"
	"sync"
	"time"
)

// errConnectionLost ends a send that went unanswered while later sends to its broker were
// answered: its connection was dropped.
var errConnectionLost = errors.New("no answer while later sends to the broker were answered: its connection was dropped")

// Bounds of the dropped-connection detector: a send is given up as lost when a send to its
// broker that started after it is answered and it has waited stuckFactor times that send's
// latency, and at least minStuck.
const (
	stuckFactor = 8
	minStuck    = 200 * time.Millisecond
)

// inflightSends detects sends pending on a dropped connection. rocketmq-client-go keeps one
// connection per broker address and, when the broker closes it, leaves the requests pending
// on it until their deadline: every send in flight on it would wait out the send timeout
// (3 s by default), holding its page and, on an ordered route, its key. A broker that answers
// sends begun after one that still waits, with latencies far below its wait, is alive; the
// waiting send's connection is gone. Its context is cancelled with errConnectionLost, so the
// send fails at once and is sent again on a new connection. A slow broker answers nothing
// sooner than it answers the older sends, so it loses none of them.
type inflightSends struct {
	mu       sync.Mutex
	byBroker map[string]map[*inflightSend]struct{}
}

type inflightSend struct {
	broker string
	start  time.Time
	cancel context.CancelCauseFunc
}

// start registers a send to broker and returns its context, which the detector may cancel.
func (s *inflightSends) start(ctx context.Context, broker string) (context.Context, *inflightSend) {
	ctx, cancel := context.WithCancelCause(ctx)
	f := &inflightSend{broker: broker, start: time.Now(), cancel: cancel}
	s.mu.Lock()
	if s.byBroker == nil {
		s.byBroker = map[string]map[*inflightSend]struct{}{}
	}
	m := s.byBroker[broker]
	if m == nil {
		m = map[*inflightSend]struct{}{}
		s.byBroker[broker] = m
	}
	m[f] = struct{}{}
	s.mu.Unlock()
	return ctx, f
}

// finish unregisters f; when it was answered, the sends to its broker begun before it that
// have waited far longer than it took are given up as lost.
func (s *inflightSends) finish(f *inflightSend, answered bool) {
	if f == nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.byBroker[f.broker]
	delete(m, f)
	defer f.cancel(nil)
	if !answered {
		return
	}
	bound := max(minStuck, stuckFactor*now.Sub(f.start))
	for o := range m {
		if o.start.Before(f.start) && now.Sub(o.start) > bound {
			delete(m, o)
			o.cancel(errConnectionLost)
		}
	}
}
