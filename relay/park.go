// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"time"
)

// Parked rows (relay.go, parkHeld) are pending rows of an ordered key held behind an unsent
// row of the key, their head, made due when the head is. Each says so in its fail_reason,
// naming its head, so that any leader can follow the head whatever happens to it: sent or
// dead in a pass (parkHeld), deleted (soft or hard), brought due or put off by an operator
// or by a broker's recovery (reviewParked), or under a new leader (Store.FindParked).
// Their reason and the statements that find them: internal/outboxsql/park.go.

// parkReviewEvery is how often the heads of the parked keys are looked at: once a second,
// once more per thousand keys (one statement each).
func parkReviewEvery(keys int) time.Duration { return time.Second * time.Duration(1+keys/1000) }

// parkFindAgain is how long after a failed search for parked rows (Store.FindParked) the next
// one runs: it reads every parked row, and a table whose search times out would otherwise
// pay it on every pass.
const parkFindAgain = time.Minute

// reviewParked lets the parked rows of every key whose head is no longer what they wait for
// go now: a head deleted, sent, dead, or due at another time than they are. On its first run
// in a term it finds the keys parked before (by an earlier leader, or this one in an earlier
// term). It runs on the pass's goroutine, at most every parkReviewEvery unless a broker's
// recovery brought deferred rows forward since.
func (r *Relay) reviewParked(ctx context.Context) {
	now := time.Now()
	if !r.parkedFound {
		if now.Sub(r.parkReviewed) < parkFindAgain {
			return // the last search failed: not on every pass
		}
		nowMs, err := r.dbNow(ctx) // due times are the database's clock
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
		nowMs, err = r.dbNow(ctx)
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
