// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
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
	// refusing is since when the database has refused the relay's writes (a read-only
	// server found by checkDatabase, write-backs failing over and over); 0: it accepts them.
	// A refusal of every write is no progress: it counts on the stall clock like silence.
	refusing atomic.Int64
	// readOnly is since when checkDatabase has found the server read-only; 0: writable.
	readOnly atomic.Int64
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

// restart starts a leader's term: the database has just answered (the lock's holder read
// it), and no refusal of an earlier term counts.
func (p *progress) restart() {
	p.mark()
	p.accepted()
	p.foundReadOnly(false)
}

// Begin records that a statement is sent.
func (p *progress) Begin() {
	if p != nil {
		p.unanswered.CompareAndSwap(0, p.now())
	}
}

// End records how a statement ended: an answer (a result or the server's refusal) or not.
func (p *progress) End(err error) {
	if p != nil && (err == nil || isDatabaseAnswer(err)) {
		p.mark()
	}
}

// refused records that the database refuses the relay's writes (the first time starts the
// count).
func (p *progress) refused() {
	if p != nil {
		p.refusing.CompareAndSwap(0, p.now())
	}
}

// accepted records that the database accepts writes again.
func (p *progress) accepted() {
	if p != nil {
		p.refusing.Store(0)
	}
}

// foundReadOnly records whether checkDatabase found the server read-only.
func (p *progress) foundReadOnly(on bool) {
	if p == nil {
		return
	}
	if on {
		p.readOnly.CompareAndSwap(0, p.now())
	} else {
		p.readOnly.Store(0)
	}
}

// refusingFor returns how long the database has refused the relay's writes (write-backs
// failing, or the server found read-only); 0 when it accepts them.
func (p *progress) refusingFor() time.Duration {
	var d time.Duration
	for _, f := range []int64{p.refusing.Load(), p.readOnly.Load()} {
		if f != 0 {
			d = max(d, time.Since(p.start)-time.Duration(f))
		}
	}
	return d
}

// since returns how long ago the database last answered.
func (p *progress) since() time.Duration {
	return time.Since(p.start) - time.Duration(p.last.Load())
}

// stalledFor returns how long a statement has gone unanswered with no answer since, or the
// database has refused the relay's writes, whichever is longer; 0 when every statement sent
// was answered and writes are accepted.
func (p *progress) stalledFor() time.Duration {
	u := p.unanswered.Load()
	if u == 0 {
		return p.refusingFor()
	}
	return max(time.Since(p.start)-time.Duration(u), p.refusingFor())
}

// isDatabaseAnswer reports whether err is the server's own answer (an error packet), as
// opposed to a timeout or a broken connection. A read-only server's refusal is no answer:
// the connection leads to a server that can do nothing for the relay (mysqlerr.ReadOnly).
func isDatabaseAnswer(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && !mysqlerr.ReadOnly(err)
}

// Health is what a relay reports about itself for health checks.
type Health struct {
	// Leader is true while the relay holds the table's lock, certainly (its validity has not
	// run out), and publishes.
	Leader bool
	// SinceProgress is how long ago the database last answered the relay.
	SinceProgress time.Duration
	// Stalled is true when the leader has left a statement unanswered, with no answer
	// since, or its writes have been refused (a read-only server, write-backs failing), for
	// StallTimeout. A leader waiting on a slow broker is not stalled.
	Stalled bool
	// WritesRefused is how long the database has refused the leader's writes; 0 when it
	// accepts them.
	WritesRefused time.Duration
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
		Leader:              r.leading.Load() && r.lease.Valid(),
		SinceProgress:       r.progress.since(),
		FailingBrokers:      r.incidents.failingBrokers(),
		MisconfiguredTopics: r.incidents.misconfiguredTopics(),
	}
	h.Stalled = h.Leader && r.progress.stalledFor() > r.cfg.StallTimeout
	if h.Leader {
		h.WritesRefused = r.progress.refusingFor()
	}
	if ws := r.waitingSince.Load(); ws != 0 && !h.Leader {
		h.LockWait = time.Since(r.progress.start) - time.Duration(ws)
	}
	return h
}
