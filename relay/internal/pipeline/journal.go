// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// Journal appender's bounds (docs/decisions.md, "Broker audit: positions in a journal").
const (
	// journalInterval is how often pending entries are appended.
	journalInterval = 100 * time.Millisecond
	// journalFlushRows pending rows are appended at once, without waiting for the interval.
	journalFlushRows = 5_000
	// journalMaxRows bounds the rows pending (about 50 bytes each): past it, a write-back's
	// positions are dropped, not queued.
	journalMaxRows = 100_000
	// journalRetries is how many times an append refused is tried again, journalRetryWait
	// apart at first and doubling, before its rows are dropped.
	journalRetries   = 4
	journalRetryWait = 200 * time.Millisecond
	// journalStopTimeout bounds the last append when the appender stops.
	journalStopTimeout = 2 * time.Second
)

// appender appends the positions of the rows the write-backs mark sent to the table's
// stored-position journal, in batches, off the drain's critical path: add never blocks and
// never fails a write-back. What cannot be appended (the queue full, appends refused after
// a few retries) is dropped and counted (outbox_relay_audit_unrecorded_rows_total), logged
// once per incident: the broker audit does not check those rows. It runs as a service
// (internal/startstop); Stop appends what is pending, within journalStopTimeout.
type appender struct {
	journal *storedlog.Journal
	log     zerolog.Logger
	metrics *TableMetrics
	timeout time.Duration // of one append
	svc     *startstop.Func

	mu      sync.Mutex
	pending []storedlog.Entry
	rows    int           // in pending
	wake    chan struct{} // journalFlushRows pending
	// dropped counts the rows dropped since the incident began (0: none).
	dropped int
}

func newAppender(journal *storedlog.Journal, log zerolog.Logger, tm *TableMetrics, timeout time.Duration) *appender {
	a := &appender{journal: journal, log: log, metrics: tm, timeout: timeout, wake: make(chan struct{}, 1)}
	a.svc = startstop.New(a.run)
	return a
}

// add queues the entry of the rows ps a write-back marked sent at settledMs.
func (a *appender) add(settledMs int64, ps []storedlog.Pos) {
	for len(ps) > 0 {
		n := min(len(ps), storedlog.MaxRows)
		a.queue(storedlog.Entry{SettledMs: settledMs, Positions: ps[:n]})
		ps = ps[n:]
	}
}

func (a *appender) queue(e storedlog.Entry) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rows+len(e.Positions) > journalMaxRows {
		a.dropLocked(len(e.Positions), "stored-position journal: too many positions waiting to be appended; "+
			"the rows sent meanwhile are not recorded, and the broker audit will not check them", nil)
		return
	}
	a.pending = append(a.pending, e)
	a.rows += len(e.Positions)
	if a.rows >= journalFlushRows {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// dropLocked counts n rows dropped, logging why at the first drop of an incident.
func (a *appender) dropLocked(n int, why string, err error) {
	a.metrics.AuditUnrecorded(n)
	if a.dropped == 0 {
		a.log.Error().Err(err).Str("journal", a.journal.Name()).Int("rows", n).Msg(why)
	}
	a.dropped += n
}

// take returns the pending entries and empties the queue.
func (a *appender) take() []storedlog.Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	batch := a.pending
	a.pending, a.rows = nil, 0
	return batch
}

// run appends what is pending every journalInterval, or once journalFlushRows are, until
// ctx ends; then once more, within journalStopTimeout.
func (a *appender) run(ctx context.Context) {
	tick := time.NewTicker(journalInterval)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		case <-a.wake:
		}
		if ctx.Err() == nil {
			a.flush(ctx, journalRetries)
		}
	}
	last, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalStopTimeout)
	defer cancel()
	a.flush(last, 0)
}

// flush appends the pending entries, trying a refused append retries more times (none
// while an incident lasts), and drops them when the last try fails.
func (a *appender) flush(ctx context.Context, retries int) {
	batch := a.take()
	if len(batch) == 0 {
		return
	}
	a.mu.Lock()
	if a.dropped > 0 {
		retries = 0 // appends are failing already: one try, so the queue keeps moving
	}
	a.mu.Unlock()
	wait := journalRetryWait
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, a.timeout)
		err := a.journal.Append(actx, batch)
		cancel()
		if err == nil {
			a.recovered()
			return
		}
		if attempt >= retries || !startstop.Sleep(ctx, wait) {
			n := 0
			for _, e := range batch {
				n += len(e.Positions)
			}
			a.mu.Lock()
			a.dropLocked(n, "stored-position journal: appends refused; the rows sent meanwhile are not recorded, "+
				"and the broker audit will not check them", err)
			a.mu.Unlock()
			return
		}
		wait *= 2
	}
}

// recovered ends an incident once an append succeeded.
func (a *appender) recovered() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dropped > 0 {
		a.log.Info().Str("journal", a.journal.Name()).Int("unrecorded_rows", a.dropped).
			Msg("stored-position journal: appending again")
		a.dropped = 0
	}
}

// storedPos returns the journal position of row id as s records it, and whether s is one
// the journal holds: a broker name of 1 to storedlog.MaxBrokerName bytes, a queue id and
// offset in range. An unusable offset msg id records the position without its commit log
// offset.
func storedPos(id int64, s *message.Stored) (storedlog.Pos, bool) {
	if s == nil || id <= 0 || s.Broker == "" || len(s.Broker) > storedlog.MaxBrokerName ||
		s.QueueID < 0 || s.QueueID > storedlog.MaxQueueID || s.Offset < 0 {
		return storedlog.Pos{}, false
	}
	commit, ok := s.CommitLogOffset()
	if !ok || commit == math.MaxInt64 {
		commit = -1
	}
	return storedlog.Pos{ID: id, Broker: s.Broker, QueueID: s.QueueID, Offset: s.Offset, CommitOffset: commit}, true
}
