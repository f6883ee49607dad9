// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
)

// Parked rows (parkHeld) are pending rows of an ordered key held behind an unsent
// row of the key, their head, made due when the head is. Each says so in its fail_reason,
// naming its head, so that any leader can follow the head whatever happens to it: sent or
// dead in a pass (parkHeld), deleted (soft or hard), brought due or put off by an operator
// or by a broker's recovery (ReviewParked), or under a new leader (Store.FindParked).
// Their reason and the statements that find them: internal/outboxsql/park.go.

// parkReviewEvery is how often the heads of the parked keys are looked at: once a second,
// once more per thousand keys (one statement each).
func parkReviewEvery(keys int) time.Duration { return time.Second * time.Duration(1+keys/1000) }

// parkFindAgain is how long after a failed search for parked rows (Store.FindParked) the next
// one runs: it reads every parked row, and a table whose search times out would otherwise
// pay it on every pass.
const parkFindAgain = time.Minute

// ReviewParked lets the parked rows of every key whose head is no longer what they wait for
// go now: a head deleted, sent, dead, or due at another time than they are. On its first run
// in a term it finds the keys parked before (by an earlier leader, or this one in an earlier
// term). It runs on the pass's goroutine, at most every parkReviewEvery unless a broker's
// recovery brought deferred rows forward since.
func (r *Engine) ReviewParked(ctx context.Context) {
	now := time.Now()
	if !r.parkedFound {
		if now.Sub(r.parkReviewed) < parkFindAgain {
			return // the last search failed: not on every pass
		}
		nowMs, err := r.DBNow(ctx) // due times are the database's clock
		if err != nil {
			return
		}
		found, err := r.store.FindParked(ctx, nowMs, maxParkedKeys)
		if err != nil {
			r.parkReviewed = now
			r.log.Warn().Err(err).Msg("parked rows not looked for (again in a minute); till then they wait until their head's due time")
			return
		}
		r.parked, r.parkedFound = found, true
	} else if !r.parkReview.Swap(false) && now.Sub(r.parkReviewed) < parkReviewEvery(len(r.parked)) {
		return
	}
	r.parkReviewed = now
	if len(r.parked) == 0 {
		return
	}
	ids := make([]int64, 0, len(r.parked))
	for _, h := range r.parked {
		ids = append(ids, h.ID)
	}
	heads, err := r.store.HeadStates(ctx, ids)
	var nowMs int64
	if err == nil {
		nowMs, err = r.DBNow(ctx)
	}
	if err != nil {
		r.log.Warn().Err(err).Msg("heads of parked keys not read; looked at again later")
		return
	}
	for k, h := range r.parked {
		if st, ok := heads[h.ID]; ok && (st.Status == 0 || st.Status == 1) && st.Due == h.DueMs {
			continue // still holding its key until the parked rows' due time
		}
		delete(r.parked, k)
		n, err := r.store.Unpark(ctx, k, h.ID, h.DueMs, nowMs)
		if err != nil {
			r.log.Warn().Err(err).Str("sharding_key", k.Key).Msg("head of a parked key gone or moved; its rows wait until its old due time")
			continue
		}
		r.log.Debug().Str("sharding_key", k.Key).Int64("head", h.ID).Int64("rows", n).Msg("head of a parked key gone or moved: its rows are due now")
	}
}

// parkAfter is how far in the future a held key's head must be due for the key's held rows
// to be parked: a head due sooner is read again with them, a pass or two, which costs less
// than their park and the write that makes them due. Whatever then moves the head (a broker's
// recovery bringing deferred rows forward, an operator), ReviewParked moves its rows along.
const parkAfter = time.Second

// maxParkedKeys bounds the parked keys remembered for an early unpark.
const maxParkedKeys = 100000

// heldRows are the rows of a page held behind the unsent head of their ordered key.
type heldRows map[outboxsql.OrderKey]*heldKey

type heldKey struct {
	head outboxsql.HeldHead
	ids  []int64
}

func (h *heldRows) add(k outboxsql.OrderKey, head outboxsql.HeldHead, id int64) {
	if *h == nil {
		*h = heldRows{}
	}
	hk := (*h)[k]
	if hk == nil {
		hk = &heldKey{head: head}
		(*h)[k] = hk
	}
	hk.ids = append(hk.ids, id)
}

// parkHeld keeps a key known blocked from being read again pass after pass. The rows of
// hold wait behind a head due more than parkAfter from now: they are made due when their
// head is (store.park), so that the scan skips them until then and a pass costs the same
// whatever the backlog held behind a waiting head. A parked key whose head was sent or went
// dead before its time (an operator brought it forward) is made due again now
// (store.unpark); ReviewParked does the same for a head deleted or moved.
func (r *Engine) parkHeld(ctx context.Context, hold heldRows, items []item, results []result) {
	nowMs, err := r.DBNow(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("held rows not parked: they are read again by the next pass")
		return
	}
	for i, it := range items {
		if it.msg == nil || len(r.parked) == 0 || (results[i].kind != sent && results[i].kind != dead) {
			continue
		}
		k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
		if h, ok := r.parked[k]; ok && h.ID == it.row.ID {
			delete(r.parked, k)
			if n, err := r.store.Unpark(ctx, k, h.ID, h.DueMs, nowMs); err != nil {
				r.log.Warn().Err(err).Str("sharding_key", k.Key).Msg("head of a parked key sent; its rows wait until the head's old due time")
			} else if n > 0 {
				r.log.Debug().Str("sharding_key", k.Key).Int64("rows", n).Msg("head of a parked key sent: its rows are due now")
			}
		}
	}
	for k, hk := range hold {
		if hk.head.DueMs <= nowMs+parkAfter.Milliseconds() {
			continue // due soon: read again, as any held row
		}
		// The ordered check names the nearest unsent row below the page as the head: for rows
		// written after a parked backlog, one of its parked rows, due with the real head.
		// The head remembered (and named in the rows' reason) stays the older one, whose
		// send or move brings the key forward.
		head := hk.head
		if old, known := r.parked[k]; known && old.ID < head.ID && old.DueMs == head.DueMs {
			head = old
		}
		n, err := r.store.Park(ctx, hk.ids, head.DueMs, head.ID)
		if err != nil {
			r.log.Warn().Err(err).Str("sharding_key", k.Key).Msg("held rows not parked; they are read again each pass")
			continue
		}
		if r.parked == nil {
			r.parked = map[outboxsql.OrderKey]outboxsql.HeldHead{}
		}
		if _, known := r.parked[k]; known || len(r.parked) < maxParkedKeys {
			r.parked[k] = head
		}
		r.log.Debug().Str("sharding_key", k.Key).Int64("rows", n).Int64("head", head.ID).
			Time("until", time.UnixMilli(head.DueMs)).Msg("rows held behind a waiting head parked until it is due")
	}
}
