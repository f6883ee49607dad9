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

// errOvertaken ends a send that went unanswered while later sends of its client to its
// broker were answered.
var errOvertaken = fmt.Errorf("%w: no answer while later sends of the same client to the broker were answered", errConnectionLost)

// Bounds of the dropped-connection detector: a send is given up as lost when a send of the
// same client to the same broker that began after it is answered, and it has waited
// stuckFactor times that send's latency, and at least minStuck plus stuckPerMessage for each
// message it carries (a large batch takes the broker longer to store than a small send).
const (
	stuckFactor     = 16
	minStuck        = 100 * time.Millisecond
	stuckPerMessage = 2 * time.Millisecond
)

// inflightSends detects sends pending on a dropped connection. rocketmq-client-go keeps one
// connection per broker address and client and, when the broker closes it, leaves the
// requests pending on it until their deadline: every send in flight on it would wait out
// the send timeout (3 s by default), holding its page and, on an ordered route, its key. The
// client's next send to that broker opens a new connection; when it is answered while an
// older send of the same client is still pending, far longer than the new one took, the old
// one's connection is gone. Its context is cancelled with errOvertaken, so the send fails at
// once and is sent again (RocketMQPublisher.Send). A slow broker answers the newer send no
// sooner than the older ones, so it loses none; the bounds leave room for a broker that
// answers one connection's requests out of order.
type inflightSends struct {
	mu     sync.Mutex
	byConn map[string]map[*inflightSend]struct{}
}

type inflightSend struct {
	conn   string
	start  time.Time
	min    time.Duration // the least wait before it may be given up
	cancel context.CancelCauseFunc
}

// start registers a send of msgs messages on conn (a broker and a client) and returns its
// context, which the detector may cancel.
func (s *inflightSends) start(ctx context.Context, conn string, msgs int) (context.Context, *inflightSend) {
	ctx, cancel := context.WithCancelCause(ctx)
	f := &inflightSend{conn: conn, start: time.Now(), min: minStuck + time.Duration(msgs)*stuckPerMessage, cancel: cancel}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byConn == nil {
		s.byConn = map[string]map[*inflightSend]struct{}{}
	}
	m := s.byConn[conn]
	if m == nil {
		m = map[*inflightSend]struct{}{}
		s.byConn[conn] = m
	}
	m[f] = struct{}{}
	return ctx, f
}

// finish unregisters f; when it was answered, the sends on its connection begun before it
// that have waited far longer than it took are given up as lost.
func (s *inflightSends) finish(f *inflightSend, answered bool) {
	if f == nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer f.cancel(nil)
	m := s.byConn[f.conn]
	delete(m, f)
	if !answered {
		return
	}
	took := stuckFactor * now.Sub(f.start)
	for o := range m {
		if o.start.Before(f.start) && now.Sub(o.start) > max(o.min, took) {
			delete(m, o)
			o.cancel(errOvertaken)
		}
	}
}
