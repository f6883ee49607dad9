// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"errors"
	"time"
)

// Stats counts what one pass (relay.DrainOnce) did.
type Stats struct {
	// Read is the number of due rows read.
	Read int
	// Sent, Retried and Dead count the rows whose status this relay changed.
	Sent, Retried, Dead int
	// Deferred counts rows whose attempt failed in a broker incident: they wait out the
	// broker's backoff with their retry count untouched.
	Deferred int
	// Held is the number of due rows left for later: held back behind an earlier message of
	// their ordered key, still being sent by an earlier pass's slow send, or abandoned when
	// the context ended.
	Held int
}

// Changed is the number of rows whose status changed.
func (s Stats) Changed() int { return s.Sent + s.Retried + s.Dead }

func (s *Stats) add(o Stats) {
	s.Read += o.Read
	s.Sent += o.Sent
	s.Retried += o.Retried
	s.Dead += o.Dead
	s.Deferred += o.Deferred
	s.Held += o.Held
}

// Drain is relay.DrainOnce with a fence: when fence is set and returns false (the lock's validity
// has run out), nothing more is published. With detach, a page does not wait for its slow
// units (publish): they go on after the pass, and the leader waits for them (LateUnits) before
// its term ends.
func (r *Engine) Drain(stop, ctx context.Context, fence func() bool, detach bool) (Stats, error) {
	r.ReviewParked(stop)
	nowMs, err := r.DBNow(ctx)
	if err != nil {
		return Stats{}, err
	}
	pass := r.beginPass()
	scanCtx, cancelScan := context.WithCancel(ctx)
	defer cancelScan()
	pages := make(chan *page, 1)
	var scanErr error
	go func() {
		defer close(pages)
		scanErr = r.scan(stop, scanCtx, nowMs, pages)
	}()
	comp := r.startCompleter(ctx, fence)
	blocked := blockedKeys{}
	defer context.AfterFunc(stop, comp.wake)()

	for pg := range pages {
		if !comp.waitHealthy(stop, ctx) || stop.Err() != nil || ctx.Err() != nil || (fence != nil && !fence()) {
			cancelScan()
			r.cfg.MemoryBudget.release(pg.bytes)
			continue // drain the channel; these rows stay due
		}
		results := r.processPage(ctx, pg, pass, fence, blocked, detach)
		comp.submit(pg.rows, results)
	}
	st, err := comp.close()
	if scanErr != nil && ctx.Err() == nil && stop.Err() == nil && !errors.Is(scanErr, context.Canceled) {
		err = errors.Join(scanErr, err)
	}
	return st, err
}

// processPage plans and publishes one page and returns each row's result. blocked carries,
// from one page of a pass to the next, the ordered keys found held behind an unsent row
// (plan).
func (r *Engine) processPage(ctx context.Context, pg *page, pass uint64, fence func() bool, blocked blockedKeys, detach bool) []result {
	start := time.Now()
	results := make([]result, len(pg.rows))
	items, hold := r.prepareItems(pg.rows, pass, blocked, results, start)
	units, err := r.plan(ctx, items, blocked)
	if err != nil {
		// The ordered-key check could not run: hold the page's ordered rows, send the rest.
		r.log.Warn().Err(err).Msg("ordered-key check failed; ordered rows of this page wait for the next pass")
		units = r.unorderedUnits(items)
	}
	hold.addUnscheduled(items, units, blocked)
	late := r.publish(ctx, units, items, results, fence, detach)
	for _, ru := range late {
		pg.bytes -= r.goLate(ctx, ru, items, fence) // the late unit holds its bodies' bytes now
	}
	r.parkHeld(ctx, hold, items, results)
	r.judge(ctx, items, results)
	r.releasePage(pg)
	r.metrics.ObserveBatch(time.Since(start))
	return results
}

// releasePage drops the bodies of a published page (the completer needs ids and counts
// only) and gives the bytes it still holds back to the memory budget.
func (r *Engine) releasePage(pg *page) {
	for i := range pg.rows {
		pg.rows[i].Content = nil
	}
	r.cfg.MemoryBudget.release(pg.bytes)
	pg.bytes = 0
}

// judge turns failed sends into retries or deferrals (incidents.judge) and, when a broker
// recovered from an incident, brings the rows deferred during it forward.
func (r *Engine) judge(ctx context.Context, items []item, results []result) {
	if r.incidents.judge(items, results) {
		// The rows deferred during the incident hold deferrals of up to 30 s, grown while
		// the broker failed: bring them forward, so that an outage's rows follow the broker's
		// return within a pass instead of waiting them out.
		nowMs, err := r.DBNow(ctx)
		var n int64
		if err == nil {
			n, err = r.store.HastenDeferred(ctx, nowMs, deferredMark)
		}
		if err != nil {
			r.log.Warn().Err(err).Msg("broker recovered; rows deferred during its incident wait out their deferral")
		} else if n > 0 {
			r.log.Info().Int64("rows", n).Msg("broker recovered: rows deferred during its incident are due now")
			r.parks.reviewNow() // the rows parked behind them follow
		}
	}
}
