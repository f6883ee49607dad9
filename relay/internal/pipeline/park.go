// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Parked rows (parkHeld) are pending rows of an ordered key held behind an unsent
// row of the key, their head, made due when the head is. Each says so in its fail_reason,
// naming its head, so that any leader can follow the head whatever happens to it: sent or
// dead in a pass (parkHeld), deleted (soft or hard), brought due or put off by an operator
// or by a broker's recovery (ReviewParked), or under a new leader (Store.FindParked).
// Their reason and the statements that find them: internal/outboxsql/park.go. The rules
// are parkBook's, which reads and writes nothing: park_internal_test.go tests them one by
// one, without servers.

// parkReviewEvery is how often the heads of the parked keys are looked at: once a second,
// once more per thousand keys (one statement each).
func parkReviewEvery(keys int) time.Duration { return time.Second * time.Duration(1+keys/1000) }

// parkFindAgain is how long after a failed search for parked rows (Store.FindParked) the next
// one runs: it reads every parked row, and a table whose search times out would otherwise
// pay it on every pass.
const parkFindAgain = time.Minute

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

// addUnscheduled adds the ordered rows that plan left out of every unit behind the head
// noted for their key in blocked (by this page's plan or an earlier page's).
func (h *heldRows) addUnscheduled(items []item, units []unit, blocked blockedKeys) {
	if len(blocked) == 0 {
		return
	}
	scheduled := map[int]bool{}
	for _, u := range units {
		for _, i := range u.idx {
			scheduled[i] = true
		}
	}
	for i, it := range items {
		if it.msg == nil || !it.route.Ordered || it.msg.ShardingKey == "" || scheduled[i] {
			continue
		}
		k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
		if head, ok := blocked[k]; ok && it.row.ID > head.ID {
			h.add(k, head, it.row.ID)
		}
	}
}

// parkBook is what the engine knows of the parked keys, and the rules of parking that
// follow from it; it reads and writes nothing (the engine does: parkHeld, ReviewParked). The
// pass's goroutine alone uses it, review aside.
type parkBook struct {
	// keys remembers, per ordered key whose held rows were parked, the head they wait for.
	keys map[outboxsql.OrderKey]outboxsql.HeldHead
	// found says whether the keys parked before this term were found (Store.FindParked);
	// reviewed is when the heads were last looked at, or the search last failed.
	found    bool
	reviewed time.Time
	// review asks for a look at the heads at once (reviewNow, from judge).
	review atomic.Bool
}

// parkedKey is a parked key and the head its parked rows wait for.
type parkedKey struct {
	key  outboxsql.OrderKey
	head outboxsql.HeldHead
}

// parking is the held rows of one key to park behind head: made due when it is, their
// reason naming it.
type parking struct {
	parkedKey
	ids []int64
}

// reviewStep is what a review of the parked keys does now.
type reviewStep int

const (
	reviewNone  reviewStep = iota // nothing yet
	reviewFind                    // find the keys parked before this term, then look at their heads
	reviewHeads                   // look at the heads of the keys known
)

// newTerm forgets that the keys parked before were found: another leader may have parked
// rows since.
func (b *parkBook) newTerm() { b.found, b.reviewed = false, time.Time{} }

// next says what a review at now does: on its first run in a term it finds the keys parked
// before (again only parkFindAgain after a failed search, not on every pass); then it looks
// at their heads every parkReviewEvery, or at once when asked (review).
func (b *parkBook) next(now time.Time) reviewStep {
	if !b.found {
		if now.Sub(b.reviewed) < parkFindAgain {
			return reviewNone
		}
		return reviewFind
	}
	if !b.review.Swap(false) && now.Sub(b.reviewed) < parkReviewEvery(len(b.keys)) {
		return reviewNone
	}
	return reviewHeads
}

// reviewNow asks for a look at the heads at once: a broker's recovery brought deferred rows,
// heads among them, forward.
func (b *parkBook) reviewNow() { b.review.Store(true) }

// searchFailed notes a failed search for the parked keys at now: the next runs parkFindAgain
// later.
func (b *parkBook) searchFailed(now time.Time) { b.reviewed = now }

// foundKeys notes the keys a search found parked, with their heads: all of them, those known
// before included.
func (b *parkBook) foundKeys(keys map[outboxsql.OrderKey]outboxsql.HeldHead) {
	b.keys, b.found = keys, true
}

// looked notes a look at the heads at now.
func (b *parkBook) looked(now time.Time) { b.reviewed = now }

// headIDs returns the heads of the keys known.
func (b *parkBook) headIDs() []int64 {
	ids := make([]int64, 0, len(b.keys))
	for _, h := range b.keys {
		ids = append(ids, h.ID)
	}
	return ids
}

// moved forgets and returns the keys whose head no longer holds their parked rows, given
// the heads as read (Store.HeadStates, which leaves out deleted rows): a head deleted (soft
// or hard), sent, dead, or due at another time than its parked rows (brought due, requeued,
// put off). A head still pending or failed, due when its rows are, holds them still.
func (b *parkBook) moved(heads map[int64]outboxsql.HeadState) []parkedKey {
	var out []parkedKey
	for k, h := range b.keys {
		st, ok := heads[h.ID]
		waiting := outbox.Status(st.Status) == outbox.StatusPending || outbox.Status(st.Status) == outbox.StatusFailed
		if ok && waiting && st.Due == h.DueMs {
			continue
		}
		delete(b.keys, k)
		out = append(out, parkedKey{key: k, head: h})
	}
	return out
}

// settled forgets and returns the keys whose head this page sent or made dead (results):
// their parked rows go now, not at the head's old due time.
func (b *parkBook) settled(items []item, results []result) []parkedKey {
	var out []parkedKey
	for i, it := range items {
		if it.msg == nil || len(b.keys) == 0 || (results[i].kind != sent && results[i].kind != dead) {
			continue
		}
		k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
		if h, ok := b.keys[k]; ok && h.ID == it.row.ID {
			delete(b.keys, k)
			out = append(out, parkedKey{key: k, head: h})
		}
	}
	return out
}

// toPark returns the held rows to park at nowMs (the database's clock, epoch ms): those of
// each key whose head is due more than parkAfter later; behind a head due sooner they are
// read again, as any held row. The ordered check names the nearest unsent row below the page
// as the head: for rows written after a parked backlog, one of its parked rows, due with the
// real head. The head named then stays the older one remembered, whose send or move brings
// the key forward.
func (b *parkBook) toPark(hold heldRows, nowMs int64) []parking {
	var out []parking
	for k, hk := range hold {
		if hk.head.DueMs <= nowMs+parkAfter.Milliseconds() {
			continue
		}
		head := hk.head
		if old, known := b.keys[k]; known && old.ID < head.ID && old.DueMs == head.DueMs {
			head = old
		}
		out = append(out, parking{parkedKey: parkedKey{key: k, head: head}, ids: hk.ids})
	}
	return out
}

// remember notes that the rows of k are parked behind head: a known key's head is replaced,
// a new key is noted while fewer than maxParkedKeys are (the rows of the others wait until
// their head's due time, or until a new term's search finds them).
func (b *parkBook) remember(k outboxsql.OrderKey, head outboxsql.HeldHead) {
	if b.keys == nil {
		b.keys = map[outboxsql.OrderKey]outboxsql.HeldHead{}
	}
	if _, known := b.keys[k]; known || len(b.keys) < maxParkedKeys {
		b.keys[k] = head
	}
}

// ReviewParked lets the parked rows of every key whose head is no longer what they wait for
// go now: a head deleted, sent, dead, or due at another time than they are. On its first run
// in a term it finds the keys parked before (by an earlier leader, or this one in an earlier
// term). It runs on the pass's goroutine, at most every parkReviewEvery unless a broker's
// recovery brought deferred rows forward since (parkBook.next).
func (r *Engine) ReviewParked(ctx context.Context) {
	now := r.cfg.Now()
	switch r.parks.next(now) {
	case reviewNone:
		return
	case reviewFind:
		if !r.findParked(ctx, now) {
			return
		}
	}
	r.parks.looked(now)
	if len(r.parks.keys) == 0 {
		return
	}
	heads, err := r.store.HeadStates(ctx, r.parks.headIDs())
	var nowMs int64
	if err == nil {
		nowMs, err = r.DBNow(ctx)
	}
	if err != nil {
		r.log.Warn().Err(err).Msg("heads of parked keys not read; looked at again later")
		return
	}
	for _, p := range r.parks.moved(heads) {
		r.unpark(ctx, p, nowMs, "gone or moved")
	}
}

// findParked finds the keys parked before this term, by any leader (Store.FindParked), and
// reports whether it did; a failed search runs again parkFindAgain later.
func (r *Engine) findParked(ctx context.Context, now time.Time) bool {
	nowMs, err := r.DBNow(ctx) // due times are the database's clock
	if err != nil {
		return false
	}
	found, err := r.store.FindParked(ctx, nowMs, maxParkedKeys)
	if err != nil {
		r.parks.searchFailed(now)
		r.log.Warn().Err(err).Msg("parked rows not looked for (again in a minute); till then they wait until their head's due time")
		return false
	}
	r.parks.foundKeys(found)
	return true
}

// unpark makes the parked rows of p due at nowMs: their head (what happened to it: sent or
// dead, gone or moved) no longer holds them.
func (r *Engine) unpark(ctx context.Context, p parkedKey, nowMs int64, what string) {
	n, err := r.store.Unpark(ctx, p.key, p.head.ID, p.head.DueMs, nowMs)
	if err != nil {
		r.log.Warn().Err(err).Str("sharding_key", p.key.Key).Msg("head of a parked key " + what + "; its rows wait until the head's old due time")
		return
	}
	if n > 0 {
		r.log.Debug().Str("sharding_key", p.key.Key).Int64("head", p.head.ID).Int64("rows", n).Msg("head of a parked key " + what + ": its rows are due now")
	}
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
	for _, p := range r.parks.settled(items, results) {
		r.unpark(ctx, p, nowMs, "sent or dead")
	}
	for _, p := range r.parks.toPark(hold, nowMs) {
		n, err := r.store.Park(ctx, p.ids, p.head.DueMs, p.head.ID)
		if err != nil {
			r.log.Warn().Err(err).Str("sharding_key", p.key.Key).Msg("held rows not parked; they are read again each pass")
			continue
		}
		r.parks.remember(p.key, p.head)
		r.log.Debug().Str("sharding_key", p.key.Key).Int64("rows", n).Int64("head", p.head.ID).
			Time("until", time.UnixMilli(p.head.DueMs)).Msg("rows held behind a waiting head parked until it is due")
	}
}
