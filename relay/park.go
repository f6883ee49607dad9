// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/schema"
)

// Parked rows (relay.go, parkHeld) are pending rows of an ordered key held behind an unsent
// row of the key, their head, made due when the head is. Each says so in its fail_reason,
// naming its head, so that any leader can follow the head whatever happens to it: sent or
// dead in a pass (parkHeld), deleted (soft or hard), brought due or put off by an operator
// or by a broker's recovery (reviewParked), or under a new leader (findParked).

// parkedPrefix starts the fail_reason of a parked row; the head's id follows it.
const parkedPrefix = "parked behind id "

// parkedReason is the fail_reason of a row parked behind the row head.
func parkedReason(head int64) string {
	return parkedPrefix + strconv.FormatInt(head, 10) + ": waits for its key's earlier unsent message"
}

// parkedHead returns the head a parked row's fail_reason names.
func parkedHead(reason string) (int64, bool) {
	rest, ok := strings.CutPrefix(reason, parkedPrefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, ":")
	id, err := strconv.ParseInt(digits, 10, 64)
	return id, err == nil
}

// parkReviewEvery is how often the heads of the parked keys are looked at: once a second,
// once more per thousand keys (one statement each).
func parkReviewEvery(keys int) time.Duration { return time.Second * time.Duration(1+keys/1000) }

// parkFindAgain is how long after a failed search for parked rows (findParked) the next
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
		found, err := r.store.findParked(ctx, nowMs, maxParkedKeys)
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
		ids = append(ids, h.id)
	}
	heads, err := r.store.headStates(ctx, ids)
	var nowMs int64
	if err == nil {
		nowMs, err = r.dbNow(ctx)
	}
	if err != nil {
		r.log.Warn().Err(err).Msg("heads of parked keys not read; looked at again later")
		return
	}
	for k, h := range r.parked {
		if st, ok := heads[h.id]; ok && (st.status == 0 || st.status == 1) && st.due == h.dueMs {
			continue // still holding its key until the parked rows' due time
		}
		delete(r.parked, k)
		n, err := r.store.unpark(ctx, k, h.id, h.dueMs, nowMs)
		if err != nil {
			r.log.Warn().Err(err).Str("sharding_key", k.key).Msg("head of a parked key gone or moved; its rows wait until its old due time")
			continue
		}
		r.log.Debug().Str("sharding_key", k.key).Int64("head", h.id).Int64("rows", n).Msg("head of a parked key gone or moved: its rows are due now")
	}
}

// headState is what reviewParked reads of a parked key's head.
type headState struct {
	status int
	due    int64
}

// headStates reads the rows ids that are not deleted, by primary key.
func (s *store) headStates(ctx context.Context, ids []int64) (map[int64]headState, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	out := make(map[int64]headState, len(ids))
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(start+maxIDsPerStatement, len(ids))]
		rows, err := s.query(ctx, `SELECT id, status, next_retry_time FROM `+s.table+` FORCE INDEX (PRIMARY)
			WHERE id IN (`+placeholders(len(chunk))+`) AND `+schema.NotDeletedSQL, int64Args(chunk)...)
		if err != nil {
			return nil, fmt.Errorf("read the heads of parked keys in %s: %w", s.name, err)
		}
		for rows.Next() {
			var id int64
			var st headState
			if err := rows.Scan(&id, &st.status, &st.due); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read the heads of parked keys in %s: %w", s.name, err)
			}
			out[id] = st
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("read the heads of parked keys in %s: %w", s.name, err)
		}
	}
	return out, nil
}

// findParked returns the keys whose rows are parked (pending, due after nowMs, a reason of
// parkedReason), up to limit keys, each with the oldest head its rows name and their due
// time. It reads every parked row once, on the page query's index: a leader does it once a
// term.
func (s *store) findParked(ctx context.Context, nowMs int64, limit int) (map[orderKey]heldHead, error) {
	if err := s.scanIndex(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	where, args := s.partitionWhere(nil)
	rows, err := s.query(ctx, `SELECT COALESCE(topic, ''), COALESCE(sharding_key, ''), next_retry_time, fail_reason FROM `+s.table+s.scanHint+`
		WHERE `+where+`status = 0 AND next_retry_time > ? AND `+schema.NotDeletedSQL+` AND fail_reason LIKE ?
		GROUP BY 1, 2, 3, 4`, append(args, nowMs, likeEscape(parkedPrefix)+"%")...)
	if err != nil {
		return nil, fmt.Errorf("find parked rows of %s: %w", s.name, err)
	}
	defer rows.Close()
	out := map[orderKey]heldHead{}
	for rows.Next() {
		var k orderKey
		var due int64
		var reason string
		if err := rows.Scan(&k.topic, &k.key, &due, &reason); err != nil {
			return nil, fmt.Errorf("find parked rows of %s: %w", s.name, err)
		}
		head, ok := parkedHead(reason)
		if h, known := out[k]; !ok || (known && h.id < head) || (!known && len(out) >= limit) {
			continue
		}
		out[k] = heldHead{id: head, dueMs: due}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("find parked rows of %s: %w", s.name, err)
	}
	return out, nil
}
