// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
)

// Progress is the stall clock: it remembers when the database last answered the relay (a
// row read, a write-back, or a refusal: an answer all the same) and since when a statement
// has gone unanswered. Silence is no stall: a leader busy with a slow broker sends no
// statement for a while, and its database is fine. A stall is a statement sent and left
// unanswered (timed out, connection broken, still waiting) with no answer since: a leader
// in that state for StallTimeout gives its lock up, since its own path to the database may
// be the broken one. A nil *Progress tracks nothing.
type Progress struct {
	start      time.Time    // monotonic origin
	last       atomic.Int64 // last answer, nanoseconds after start
	unanswered atomic.Int64 // first statement sent since the last answer; 0: none
	// refusing is since when the database has refused the relay's writes (a read-only
	// server found by CheckDatabase, write-backs failing over and over); 0: it accepts them.
	// A refusal of every write is no progress: it counts on the stall clock like silence.
	refusing atomic.Int64
	// readOnly is since when CheckDatabase has found the server read-only; 0: writable.
	readOnly atomic.Int64
}

func (p *Progress) now() int64 { return max(1, int64(time.Since(p.start))) }

// mark records an answer of the database; it also starts the clock.
func (p *Progress) mark() {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	p.last.Store(p.now())
	p.unanswered.Store(0)
}

// Restart starts a leader's term: the database has just answered (the lock's holder read
// it), and no refusal of an earlier term counts.
func (p *Progress) Restart() {
	p.mark()
	p.accepted()
	p.foundReadOnly(false)
}

// Begin records that a statement is sent.
func (p *Progress) Begin() {
	if p != nil {
		p.unanswered.CompareAndSwap(0, p.now())
	}
}

// End records how a statement ended: an answer (a result or the server's refusal) or not.
func (p *Progress) End(err error) {
	if p != nil && (err == nil || isDatabaseAnswer(err)) {
		p.mark()
	}
}

// refused records that the database refuses the relay's writes (the first time starts the
// count).
func (p *Progress) refused() {
	if p != nil {
		p.refusing.CompareAndSwap(0, p.now())
	}
}

// accepted records that the database accepts writes again.
func (p *Progress) accepted() {
	if p != nil {
		p.refusing.Store(0)
	}
}

// foundReadOnly records whether CheckDatabase found the server read-only.
func (p *Progress) foundReadOnly(on bool) {
	if p == nil {
		return
	}
	if on {
		p.readOnly.CompareAndSwap(0, p.now())
	} else {
		p.readOnly.Store(0)
	}
}

// RefusingFor returns how long the database has refused the relay's writes (write-backs
// failing, or the server found read-only); 0 when it accepts them.
func (p *Progress) RefusingFor() time.Duration {
	var d time.Duration
	for _, f := range []int64{p.refusing.Load(), p.readOnly.Load()} {
		if f != 0 {
			d = max(d, time.Since(p.start)-time.Duration(f))
		}
	}
	return d
}

// Since returns how long ago the database last answered.
func (p *Progress) Since() time.Duration {
	return time.Since(p.start) - time.Duration(p.last.Load())
}

// StalledFor returns how long a statement has gone unanswered with no answer since, or the
// database has refused the relay's writes, whichever is longer; 0 when every statement sent
// was answered and writes are accepted.
func (p *Progress) StalledFor() time.Duration {
	u := p.unanswered.Load()
	if u == 0 {
		return p.RefusingFor()
	}
	return max(time.Since(p.start)-time.Duration(u), p.RefusingFor())
}

// isDatabaseAnswer reports whether err is the server's own answer (an error packet), as
// opposed to a timeout or a broken connection. A read-only server's refusal is no answer:
// the connection leads to a server that can do nothing for the relay (mysqlerr.ReadOnly).
func isDatabaseAnswer(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && !mysqlerr.ReadOnly(err)
}

// Start returns when the clock started: the origin of the times it keeps.
func (p *Progress) Start() time.Time { return p.start }
