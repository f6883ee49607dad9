// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
)

// heldByLateUnit reports whether a late unit holds the row id, or wrote it back while pass
// (the pass of the page that read it) or a later one ran: the page's copy of the row is then
// older than the write-back.
func (r *Engine) heldByLateUnit(id int64, pass uint64) bool {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	if _, ok := r.inflight[id]; ok {
		return true
	}
	at, ok := r.settled[id]
	return ok && at >= pass
}

// beginPass numbers a new pass and forgets the late units' rows written back before the
// previous pass began: every page read from now on was read after their write-back.
func (r *Engine) beginPass() uint64 {
	pass := r.passSeq.Add(1)
	r.inflightMu.Lock()
	for id, at := range r.settled {
		if at+1 < pass {
			delete(r.settled, id)
		}
	}
	r.inflightMu.Unlock()
	return pass
}

// goLate takes over a unit its page did not wait for (publish): its rows are held (later
// passes skip them) until it ends and its results are judged and written back on their own,
// acknowledged sends whatever the lock, like any page's. Then the leader is woken: the rows
// behind them (the rest of an ordered key) may go. It returns the bodies' bytes the unit
// now holds of the MemoryBudget, which it releases when its sends have ended. The unit runs
// in the engine's LateUnits, which the leader stops (waits for) before it releases the lock.
func (r *Engine) goLate(ctx context.Context, ru *running, items []item, fence func() bool) (bodies int64) {
	lateItems := make([]item, len(ru.u.idx))
	rows := make([]outboxsql.Row, len(ru.u.idx))
	r.inflightMu.Lock()
	for n, i := range ru.u.idx {
		bodies += int64(len(items[i].row.Content))
		rows[n] = *items[i].row
		rows[n].Content = nil // the message holds the body
		lateItems[n] = item{row: &rows[n], msg: items[i].msg, route: items[i].route}
		r.inflight[rows[n].ID] = struct{}{}
	}
	r.inflightMu.Unlock()
	r.late.Go(func() {
		<-ru.done
		r.cfg.MemoryBudget.release(bodies) // sent or failed: the client holds the bodies no more
		r.judge(ctx, lateItems, ru.out)
		comp := r.startCompleter(ctx, fence)
		comp.submit(rows, ru.out)
		if _, err := comp.close(); err != nil {
			r.log.Warn().Err(err).Int("rows", len(rows)).Msg("write-back of a late unit failed; its rows stay due")
		}
		r.inflightMu.Lock()
		at := r.passSeq.Load()
		for n := range rows {
			delete(r.inflight, rows[n].ID)
			r.settled[rows[n].ID] = at
		}
		r.inflightMu.Unlock()
		select {
		case r.lateDone <- struct{}{}:
		default:
		}
	})
	return bodies
}
