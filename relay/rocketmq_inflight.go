package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errConnectionLost marks a send whose connection to the broker was lost: the client opens a
// new one for the next send, so the publisher sends it again at once.
var errConnectionLost = errors.New("connection to the broker lost")

// errOvertaken ends a send that went unanswered while later sends to its broker were.
var errOvertaken = fmt.Errorf("%w: no answer while later sends to the broker were answered", errConnectionLost)

// errStuck ends a send that went unanswered for many times the broker's recent latency
// while the broker answered other sends.
var errStuck = fmt.Errorf("%w: no answer for many times the broker's latency while it answers other sends", errConnectionLost)

// Bounds of the dropped-connection detector: a send is given up as lost after stuckFactor
// times the broker's slowest recent answer, and at least minStuck plus stuckPerMessage for
// each message it carries (a large batch takes the broker longer to store than a small
// send), when the broker answered another send within answeredWithin.
const (
	stuckFactor     = 8
	minStuck        = 20 * time.Millisecond
	stuckPerMessage = time.Millisecond
	answeredWithin  = time.Second
	latencyWindow   = 32 // answers remembered per broker
)

// inflightSends detects sends pending on a dropped connection. rocketmq-client-go keeps each
// client's one connection per broker address and, when the broker closes it, leaves the
// requests pending on it until their deadline: every send in flight on it would wait out the
// send timeout (3 s by default), holding its page and, on an ordered route, its key. A
// broker that answers sends on other connections, or sends begun later, far sooner than a
// pending one has waited is alive; the pending send's connection is gone. Its context is
// cancelled with errConnectionLost, so the send fails at once and is sent again on a new
// connection. A slow broker answers nothing sooner than it answers the older sends, and
// after answeredWithin without an answer no send is given up: a slow broker loses none.
type inflightSends struct {
	mu       sync.Mutex
	byBroker map[string]*brokerSends
}

type brokerSends struct {
	pending  map[*inflightSend]struct{}
	answered time.Time                    // the last answer
	recent   [latencyWindow]time.Duration // latencies of the last answers, a ring
	n        int
}

// slowest returns the slowest of the broker's recent answers.
func (b *brokerSends) slowest() time.Duration {
	var m time.Duration
	for _, d := range b.recent {
		m = max(m, d)
	}
	return m
}

type inflightSend struct {
	broker string
	start  time.Time
	min    time.Duration // the least wait before it may be given up
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

// start registers a send of msgs messages to broker and returns its context, which the
// detector may cancel.
func (s *inflightSends) start(ctx context.Context, broker string, msgs int) (context.Context, *inflightSend) {
	ctx, cancel := context.WithCancelCause(ctx)
	f := &inflightSend{broker: broker, start: time.Now(), min: minStuck + time.Duration(msgs)*stuckPerMessage, cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byBroker == nil {
		s.byBroker = map[string]*brokerSends{}
	}
	b := s.byBroker[broker]
	if b == nil {
		b = &brokerSends{pending: map[*inflightSend]struct{}{}}
		s.byBroker[broker] = b
	}
	b.pending[f] = struct{}{}
	if b.n > 0 {
		f.timer = time.AfterFunc(max(f.min, stuckFactor*b.slowest()), func() { s.expire(f) })
	}
	return ctx, f
}

// expire gives f up when its broker answered another send lately.
func (s *inflightSends) expire(f *inflightSend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.byBroker[f.broker]
	if _, ok := b.pending[f]; !ok || time.Since(b.answered) > answeredWithin {
		return
	}
	delete(b.pending, f)
	f.cancel(errStuck)
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
	if f.timer != nil {
		f.timer.Stop()
	}
	defer f.cancel(nil)
	b := s.byBroker[f.broker]
	delete(b.pending, f)
	if !answered {
		return
	}
	took := now.Sub(f.start)
	b.answered = now
	b.recent[b.n%latencyWindow] = took
	b.n++
	for o := range b.pending {
		if o.start.Before(f.start) && now.Sub(o.start) > max(o.min, stuckFactor*took) {
			delete(b.pending, o)
			if o.timer != nil {
				o.timer.Stop()
			}
			o.cancel(errOvertaken)
		}
	}
}
