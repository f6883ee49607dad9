// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// completion is one published page's outcome, waiting to be written back.
type completion struct {
	rows    []outboxsql.Row
	results []result
}

// completer is the write-back stage of a pass: it records published pages' results with
// set-based UPDATEs while later pages are published, coalescing the pages that queue up
// into the same statements. When the database refuses a write-back (a read-only primary
// after a failover, a missing grant, a trigger), the completer keeps the results, retries on
// a backoff of its own, and holds the publish stage back (waitHealthy) so that no
// acknowledged message is published again and again; it resumes when a write succeeds. It
// runs as a service (internal/startstop) from startCompleter until close.
type completer struct {
	r     *Engine
	fence func() bool
	in    chan completion
	svc   *startstop.Func

	mu      sync.Mutex
	cond    *sync.Cond
	failing bool
	stats   Stats
	err     error
}

// writeBackRetryMax caps the completer's backoff while the database refuses write-backs.
const writeBackRetryMax = 30 * time.Second

// startCompleter starts a completer whose write-backs run under ctx (the pass's): once ctx
// is done, a write-back refused is tried once more, acknowledged sends still written back.
func (r *Engine) startCompleter(ctx context.Context, fence func() bool) *completer {
	c := &completer{r: r, fence: fence, in: make(chan completion, 4)}
	c.cond = sync.NewCond(&c.mu)
	c.svc = startstop.New(c.run)
	_ = c.svc.Start(ctx) // a Func never fails to start
	return c
}

// submit queues a page's results; it blocks while four pages already wait.
func (c *completer) submit(rows []outboxsql.Row, results []result) {
	c.in <- completion{rows: rows, results: results}
}

// waitHealthy blocks while write-backs fail, and reports whether the pass may go on
// publishing (false once stop or ctx is done).
func (c *completer) waitHealthy(stop, ctx context.Context) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.failing && stop.Err() == nil && ctx.Err() == nil {
		c.cond.Wait()
	}
	return stop.Err() == nil && ctx.Err() == nil
}

// close waits for every queued result to be written back and returns the pass's stats.
func (c *completer) close() (Stats, error) {
	close(c.in)
	<-c.svc.Stopped()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats, c.err
}

// wake wakes waitHealthy, so that a publish stage held back can see that it must stop.
func (c *completer) wake() {
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// run writes back what is submitted until close, under ctx.
func (c *completer) run(ctx context.Context) {
	stopWake := context.AfterFunc(ctx, c.wake)
	defer stopWake()
	for first := range c.in {
		batch := []completion{first}
	more:
		for len(batch) < 8 {
			select {
			case next, ok := <-c.in:
				if !ok {
					break more
				}
				batch = append(batch, next)
			default:
				break more
			}
		}
		st, err := c.writeWithRetry(ctx, batch)
		c.mu.Lock()
		c.stats.add(st)
		if err != nil {
			c.err = errors.Join(c.err, err)
		}
		c.mu.Unlock()
	}
}

// writeWithRetry writes batch back, retrying with backoff while the database refuses; it
// gives up (the rows stay due and will be published again) only when pass (the pass's
// context) ends and a last attempt fails.
func (c *completer) writeWithRetry(pass context.Context, batch []completion) (Stats, error) {
	rows, results := batch[0].rows, batch[0].results
	if len(batch) > 1 {
		n := 0
		for _, b := range batch {
			n += len(b.rows)
		}
		rows, results = make([]outboxsql.Row, 0, n), make([]result, 0, n)
		for _, b := range batch {
			rows = append(rows, b.rows...)
			results = append(results, b.results...)
		}
	}
	var st Stats
	wait := time.Second
	attempt := 0
	for {
		ctx := pass
		if ctx.Err() != nil {
			// Acknowledged results are written back even after the pass was cancelled.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(pass), c.r.cfg.QueryTimeout)
			defer cancel()
		}
		var err error
		st, rows, results, err = c.r.writeBack(ctx, rows, results, st, c.fence)
		if err != nil && mysqlerr.RowSpecific(err) {
			// One row's values refused (a trigger, a constraint, a column at its limit): the
			// rows go one at a time, and the one refused alone goes dead; the rest of the
			// table goes on.
			st, rows, results, err = c.r.isolate(ctx, rows, results, st, c.fence)
		}
		if err == nil {
			if attempt > 0 {
				c.r.log.Info().Int("attempts", attempt+1).Msg("write-back recovered: publishing resumes")
				c.r.progress.accepted()
				c.setFailing(false)
			}
			return st, nil
		}
		// Refused writes count on the stall clock: a leader whose write-backs keep failing
		// gives its lock up for a standby (leader.go), and /healthz says so. A read-only
		// server's connections are dropped at once, so that the retry dials again.
		c.r.progress.refused()
		if mysqlerr.ReadOnly(err) {
			c.r.redial(ctx)
		}
		attempt++
		if pass.Err() != nil {
			c.setFailing(false)
			return st, err
		}
		if attempt == 1 {
			c.r.log.Error().Err(err).Msg("write-back failed: publishing paused until the database accepts writes; acknowledged results are kept")
			c.setFailing(true)
		}
		c.r.metrics.WriteBackFailed()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-pass.Done():
		}
		t.Stop()
		wait = min(2*wait, writeBackRetryMax)
	}
}

func (c *completer) setFailing(on bool) {
	c.mu.Lock()
	c.failing = on
	c.cond.Broadcast()
	c.mu.Unlock()
}

// writeBack records results with a few set-based UPDATEs: one for the sent rows, one per
// previous retry count for the counted failures (their next time depends on it), one per
// deferral delay, one for the dead. It returns the rows and results still to be written
// when a statement failed, so that a retry repeats only what is missing, and adds what it
// changed to st. A database answer, even a refusal, counts as progress.
//
// Once fence reports the lock's validity gone (a leader frozen past its TTL, replaced
// meanwhile), only acknowledged sends are still written: an acknowledgement is never
// forgotten, and a row the broker stored is sent whoever leads now, while a retry or a dead
// mark of ours could overwrite the new leader's judgement. Every statement is also guarded by
// the row's status and retry count as read, so a result never overwrites a newer state.
func (r *Engine) writeBack(ctx context.Context, rows []outboxsql.Row, results []result, st Stats, fence func() bool) (Stats, []outboxsql.Row, []result, error) {
	nowMs, err := r.DBNow(ctx)
	if err != nil {
		return st, rows, results, err
	}
	g := groupResults(rows, results, nowMs)
	st.Held += g.held
	if st.Read == 0 {
		st.Read = len(rows)
	}
	w := &writeBatch{r: r, rows: rows, results: results, st: &st, stale: func() bool { return fence != nil && !fence() }}
	w.write(ctx, g, nowMs)
	if len(w.errs) == 0 {
		return st, nil, nil, nil
	}
	leftRows := make([]outboxsql.Row, len(w.failedIdx))
	leftRes := make([]result, len(w.failedIdx))
	for n, i := range w.failedIdx {
		leftRows[n], leftRes[n] = rows[i], results[i]
	}
	return st, leftRows, leftRes, errors.Join(w.errs...)
}

// writeGroups are a page's results grouped by the statement that writes them back: rows
// that share their retry count as read (the guard) and their new values share one UPDATE.
type writeGroups struct {
	dead    []int
	sent    map[int][]int // by retry count as read
	retries map[retryKey][]int
	defers  map[deferKey][]int
	held    int // results that write nothing
}

type retryKey struct {
	count  int
	capped bool
}

type deferKey struct {
	next  int64
	count int
}

// groupResults groups results (of rows) by their write-back statement; nowMs is the
// database's time, from which deferred rows' next attempts count.
func groupResults(rows []outboxsql.Row, results []result, nowMs int64) writeGroups {
	g := writeGroups{sent: map[int][]int{}, retries: map[retryKey][]int{}, defers: map[deferKey][]int{}}
	for i, res := range results {
		switch res.kind {
		case sent:
			g.sent[rows[i].RetryCount] = append(g.sent[rows[i].RetryCount], i)
		case dead:
			g.dead = append(g.dead, i)
		case retry:
			k := retryKey{rows[i].RetryCount, res.capped}
			g.retries[k] = append(g.retries[k], i)
		case deferred:
			next := nowMs + res.delay.Milliseconds()
			next -= next % 100 // rows deferred together share a statement
			k := deferKey{next, rows[i].RetryCount}
			g.defers[k] = append(g.defers[k], i)
		default:
			g.held++
		}
	}
	return g
}

// writeBatch runs one page's write-back statements and collects the rows of those that
// failed, to be retried.
type writeBatch struct {
	r         *Engine
	rows      []outboxsql.Row
	results   []result
	st        *Stats
	stale     func() bool // the lock's validity ran out
	failedIdx []int
	errs      []error
}

// write runs the statements of g: the sent rows first.
func (w *writeBatch) write(ctx context.Context, g writeGroups, nowMs int64) {
	r, rows, results := w.r, w.rows, w.results
	markSent, markRetry := r.store.MarkSent, r.store.MarkRetry
	if r.cfg.PerRowWriteBack {
		markSent, markRetry = r.store.MarkSentPerRow, r.store.MarkRetryPerRow
	}
	for rc, idx := range g.sent {
		w.do(idx, func() (int64, error) { return r.markSentRows(ctx, markSent, rc, rows, results, idx, nowMs) }, &w.st.Sent, "sent")
	}
	for k, idx := range g.retries {
		next := nowMs + r.cfg.Backoff.Delay(k.count, r.cfg.Rand).Milliseconds()
		mark := markRetry
		if k.capped {
			mark = r.store.MarkTransientRetry
		}
		w.do(idx, func() (int64, error) { return mark(ctx, k.count, failures(rows, results, idx), next) }, &w.st.Retried, "retry")
	}
	for k, idx := range g.defers {
		w.do(idx, func() (int64, error) { return r.store.MarkDeferred(ctx, k.count, failures(rows, results, idx), k.next) }, &w.st.Deferred, "deferred")
	}
	w.do(g.dead, func() (int64, error) { return r.markDeadRows(ctx, rows, results, g.dead) }, &w.st.Dead, "dead")
}

// do runs f, the statement writing back the rows idx as what, adding what it changed to
// count; a failed statement's rows are kept to be retried.
func (w *writeBatch) do(idx []int, f func() (int64, error), count *int, what string) {
	if len(idx) == 0 {
		return
	}
	if what != "sent" && w.stale() {
		// The lock's validity ran out (a leader frozen past its TTL, replaced meanwhile):
		// the rows are the new leader's now, and a stale result written over what it did
		// since would be wrong. At worst the message is sent again (consumers dedupe).
		w.st.Held += len(idx)
		return
	}
	n, err := f()
	if err != nil {
		w.errs = append(w.errs, err)
		w.failedIdx = append(w.failedIdx, idx...)
		return
	}
	*count += int(n)
	w.r.warnRaced(what, len(idx), n)
	w.r.countResults(w.rows, w.results, idx)
}

// markDeadRows marks the rows idx dead with their results' reasons and logs each.
func (r *Engine) markDeadRows(ctx context.Context, rows []outboxsql.Row, results []result, idx []int) (int64, error) {
	n, err := r.store.MarkDead(ctx, failures(rows, results, idx))
	if err == nil {
		for _, i := range idx {
			rw := &rows[i]
			r.log.Warn().Int64("id", rw.ID).Str("msg_id", rw.MsgID).Str("topic", rw.Topic).Str("tag", rw.Tag).
				Str("reason", results[i].reason).Msg("message dead")
		}
	}
	return n, err
}

// isolate writes rows back one at a time after a set-based write-back was refused for the
// values of some row (mysqlerr.RowSpecific), and marks each row the database still refuses
// alone dead, with the refusal as its reason: one row's refusal costs that row, never the
// table. The rows that failed otherwise (no answer, a read-only server), and those whose dead
// mark is refused as well (every write refused, not one row's), are returned to be retried.
func (r *Engine) isolate(ctx context.Context, rows []outboxsql.Row, results []result, st Stats, fence func() bool) (Stats, []outboxsql.Row, []result, error) {
	var leftRows []outboxsql.Row
	var leftRes []result
	var errs []error
	for i := range rows {
		var err error
		st, _, _, err = r.writeBack(ctx, rows[i:i+1], results[i:i+1], st, fence)
		switch {
		case err == nil:
			continue
		case !mysqlerr.RowSpecific(err):
			leftRows, leftRes = append(leftRows, rows[i]), append(leftRes, results[i])
			errs = append(errs, err)
			continue
		}
		rw := &rows[i]
		reason := "write-back refused by the database: " + err.Error()
		if results[i].kind == sent {
			reason = "sent (acknowledged by the broker), but " + reason
		}
		n, derr := r.store.MarkDead(ctx, []outboxsql.Failure{{ID: rw.ID, Reason: reason}})
		if derr != nil {
			// Its dead mark refused too: a refusal of every write (a trigger on the whole
			// table), not of this row; retried with the others, publishing paused.
			leftRows, leftRes = append(leftRows, rows[i]), append(leftRes, results[i])
			errs = append(errs, err)
			continue
		}
		st.Dead += int(n)
		if n > 0 {
			r.metrics.Dead(rw.Topic, rw.Tag, 1)
		}
		r.log.Error().Int64("id", rw.ID).Str("msg_id", rw.MsgID).Str("topic", rw.Topic).Str("reason", reason).
			Msg("message dead: the database refuses its write-back")
	}
	return st, leftRows, leftRes, errors.Join(errs...)
}

func rowIDs(rows []outboxsql.Row, idx []int) []int64 {
	out := make([]int64, len(idx))
	for n, i := range idx {
		out[n] = rows[i].ID
	}
	return out
}

func failures(rows []outboxsql.Row, results []result, idx []int) []outboxsql.Failure {
	out := make([]outboxsql.Failure, len(idx))
	for n, i := range idx {
		out[n] = outboxsql.Failure{ID: rows[i].ID, Reason: results[i].reason}
	}
	return out
}

// warnRaced notes rows that another relay changed between our read and our write: harmless
// (the guard kept the newer state), but a sign that two relays ran at once.
func (r *Engine) warnRaced(what string, want int, got int64) {
	if int64(want) != got {
		r.log.Warn().Str("update", what).Int("rows", want).Int64("changed", got).
			Msg("rows changed by another relay meanwhile; kept their newer state")
	}
}

// countResults adds the written results to the counters, one call per topic and tag rather
// than one per row (each call takes the metrics' lock and looks the labels up).
func (r *Engine) countResults(rows []outboxsql.Row, results []result, idx []int) {
	m := r.metrics
	if m == nil {
		return
	}
	type counts struct{ published, failed, dead int }
	byPair := map[routeKey]*counts{}
	for _, i := range idx {
		rw := &rows[i]
		k := routeKey{rw.Topic, rw.Tag}
		c := byPair[k]
		if c == nil {
			c = &counts{}
			byPair[k] = c
		}
		switch results[i].kind {
		case sent:
			c.published++
		case retry:
			c.failed++
			if !results[i].capped && rw.RetryCount+1 > rw.MaxRetries {
				c.dead++
			}
		case deferred:
			if !results[i].unsent {
				c.failed++
			}
		case dead:
			c.dead++
		}
	}
	for k, c := range byPair {
		m.Published(k.topic, k.tag, c.published)
		m.Failed(k.topic, k.tag, c.failed)
		m.Dead(k.topic, k.tag, c.dead)
	}
}
