package relay

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// progress remembers when the relay last heard from the database: a page read, a write-back,
// or a refusal (an answer all the same). A leader that has not heard from it for
// StallTimeout gives up the lock, since its own path to the database may be the broken one.
type progress struct {
	start time.Time    // monotonic origin
	last  atomic.Int64 // nanoseconds after start
}

func (p *progress) mark() {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.last.Store(int64(time.Since(p.start)))
}

// since returns how long ago the database last answered.
func (p *progress) since() time.Duration {
	return time.Since(p.start) - time.Duration(p.last.Load())
}

// isDatabaseAnswer reports whether err is the server's own answer (an error packet), as
// opposed to a timeout or a broken connection.
func isDatabaseAnswer(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me)
}

// Health is what a relay reports about itself for health checks.
type Health struct {
	// Leader is true while the relay holds the table's lock and publishes.
	Leader bool
	// SinceProgress is how long ago the database last answered the relay.
	SinceProgress time.Duration
	// Stalled is true when the leader has gone StallTimeout without an answer.
	Stalled bool
	// LockWait is how long a standby has been waiting for the lock; 0 while leader.
	LockWait time.Duration
	// FailingBrokers are the brokers in an incident and since when.
	FailingBrokers map[string]time.Time
}

// Health reports the relay's state. It is safe to call from any goroutine.
func (r *Relay) Health() Health {
	h := Health{
		Leader:         r.leading.Load(),
		SinceProgress:  r.progress.since(),
		FailingBrokers: r.incidents.failingBrokers(),
	}
	h.Stalled = h.Leader && h.SinceProgress > r.cfg.StallTimeout
	if ws := r.waitingSince.Load(); ws != 0 && !h.Leader {
		h.LockWait = time.Since(r.progress.start) - time.Duration(ws)
	}
	return h
}
