// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// progress is the stall clock: it remembers when the database last answered the relay (a
// row read, a write-back, or a refusal: an answer all the same) and since when a statement
// has gone unanswered. Silence is no stall: a leader busy with a slow broker sends no
// statement for a while, and its database is fine. A stall is a statement sent and left
// unanswered (timed out, connection broken, still waiting) with no answer since: a leader
// in that state for StallTimeout gives its lock up, since its own path to the database may
// be the broken one. A nil *progress tracks nothing.
type progress struct {
	start      time.Time    // monotonic origin
	last       atomic.Int64 // last answer, nanoseconds after start
	unanswered atomic.Int64 // first statement sent since the last answer; 0: none
}

func (p *progress) now() int64 { return max(1, int64(time.Since(p.start))) }

// mark records an answer of the database; it also starts the clock.
func (p *progress) mark() {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.last.Store(p.now())
	p.unanswered.Store(0)
}

// begin records that a statement is sent.
func (p *progress) begin() {
	if p != nil {
		p.unanswered.CompareAndSwap(0, p.now())
	}
}

// end records how a statement ended: an answer (a result or the server's refusal) or not.
func (p *progress) end(err error) {
	if p != nil && (err == nil || isDatabaseAnswer(err)) {
		p.mark()
	}
}

// since returns how long ago the database last answered.
func (p *progress) since() time.Duration {
	return time.Since(p.start) - time.Duration(p.last.Load())
}

// stalledFor returns how long a statement has gone unanswered with no answer since; 0 when
// every statement sent was answered.
func (p *progress) stalledFor() time.Duration {
	u := p.unanswered.Load()
	if u == 0 {
		return 0
	}
	return time.Since(p.start) - time.Duration(u)
}

// isDatabaseAnswer reports whether err is the server's own answer (an error packet), as
// opposed to a timeout or a broken connection.
func isDatabaseAnswer(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me)
}

// Health is what a relay reports about itself for health checks.
type Health struct {
	// Leader is true while the relay holds the table's lock, certainly (its validity has not
	// run out), and publishes.
	Leader bool
	// SinceProgress is how long ago the database last answered the relay.
	SinceProgress time.Duration
	// Stalled is true when the leader has left a statement unanswered, with no answer
	// since, for StallTimeout. A leader waiting on a slow broker is not stalled.
	Stalled bool
	// LockWait is how long a standby has been waiting for the lock; 0 while leader.
	LockWait time.Duration
	// FailingBrokers are the brokers in an incident and since when.
	FailingBrokers map[string]time.Time
	// MisconfiguredTopics are the topics whose sends are refused for the relay's
	// configuration (ACL permission or credentials, message type), with the last refusal.
	MisconfiguredTopics map[string]string
}

// Health reports the relay's state. It is safe to call from any goroutine.
func (r *Relay) Health() Health {
	h := Health{
		Leader:              r.leading.Load() && r.lockValid(),
		SinceProgress:       r.progress.since(),
		FailingBrokers:      r.incidents.failingBrokers(),
		MisconfiguredTopics: r.incidents.misconfiguredTopics(),
	}
	h.Stalled = h.Leader && r.progress.stalledFor() > r.cfg.StallTimeout
	if ws := r.waitingSince.Load(); ws != 0 && !h.Leader {
		h.LockWait = time.Since(r.progress.start) - time.Duration(ws)
	}
	return h
}
