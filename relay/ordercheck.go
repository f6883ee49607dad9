// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/schema"
)

// checkStreamsPerStatement bounds the streams one statement of the ordered check reads (two
// subqueries each), so that a page of 1,000 keys costs a few statements per round.
const checkStreamsPerStatement = 200

// checkFirstLimit is how many of a stream's older rows the check's first round reads below
// the page's; each further round, for the streams still undecided (their nearest older
// rows all of unordered routes), reads eight times as many.
const checkFirstLimit = 4

// orderedHeads returns, per ordered stream of a page (its rows' ids, ascending), the
// stream's unsent row that holds the page's rows of the stream back, with its due time:
// the page's rows of the stream after it wait. A stream absent from the map goes whole.
//
// On a table with the (sharding_key, id) index it reads only what decides: each stream's
// nearest older row first, for all streams in one statement (nearestOlder), then, one
// statement per round for up to checkStreamsPerStatement streams, the stream's rows between
// its first and last row in the page that are unsent and not in the page, and, for the
// streams whose nearest row did not decide, their older rows, newest first, up to the first
// ordered one. Rows of other topics,
// of unordered routes (ordered(topic, tag) false), dead and soft-deleted rows are skipped,
// as they hold nothing back. An unsent ordered row holds the stream; a sent one decides
// that nothing older does: in a healthy table every older row of the stream was sent before
// it (a dead row requeued behind sent ones no longer holds later rows; it goes on its own).
// Parked rows are unsent rows and hold like any. Without that index it reads the keys'
// unsent rows (unsentUpTo), as the (sharding_key, status, id) index of older tables serves.
func (s *store) orderedHeads(ctx context.Context, streams map[orderKey][]int64, ordered func(topic, tag string) bool) (map[orderKey]heldHead, error) {
	if len(streams) == 0 {
		return nil, nil
	}
	hint, err := s.orderedIndex(ctx)
	if err != nil {
		return nil, err
	}
	if hint == "" {
		return s.headsFromUnsent(ctx, streams, ordered)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	heads := map[orderKey]heldHead{}
	type walk struct {
		k     orderKey
		below int64 // read the stream's rows with ids below this
		limit int
	}
	walks := make([]walk, 0, len(streams))
	inner := make([]orderKey, 0, len(streams))
	for k, ids := range streams {
		walks = append(walks, walk{k: k, below: ids[0], limit: checkFirstLimit})
		if len(ids) > 1 {
			inner = append(inner, k)
		}
	}
	// A stable order, for statements that read alike from page to page.
	slices.SortFunc(walks, func(a, b walk) int { return strings.Compare(a.k.key+"\x00"+a.k.topic, b.k.key+"\x00"+b.k.topic) })
	// The first round: each stream's nearest older row, in one statement for many streams.
	// The row decides when it is of the stream and of an ordered route; the streams it does
	// not decide walk on below it.
	keys, bounds := make([]orderKey, len(walks)), make([]int64, len(walks))
	for n, w := range walks {
		keys[n], bounds[n] = w.k, w.below
	}
	nearest, err := s.nearestOlder(ctx, hint, keys, bounds)
	if err != nil {
		return nil, s.checkFailed(err)
	}
	undecided := walks[:0]
	for n, w := range walks {
		r, found := nearest[n]
		switch {
		case !found:
			// No older row of the stream at all: nothing holds it.
		case r.key == w.k.key && r.topic == w.k.topic && ordered(r.topic, r.tag):
			if r.status != 2 {
				heads[w.k] = heldHead{id: r.id, dueMs: r.due}
			}
		default:
			undecided = append(undecided, walk{k: w.k, below: r.id, limit: checkFirstLimit * 8})
		}
	}
	walks = undecided
	innerDone := len(inner) == 0
	for len(walks) > 0 || !innerDone {
		var next []walk
		for start := 0; start < max(len(walks), 1); start += checkStreamsPerStatement {
			chunk := walks[start:min(start+checkStreamsPerStatement, len(walks))]
			var parts []string
			var args []any
			if !innerDone && start == 0 {
				// The rows between a stream's first and last row in the page: only the
				// unsent ones matter (a gap in the page's run of the stream).
				for n, k := range inner {
					ids := streams[k]
					parts = append(parts, `(SELECT `+fmt.Sprint(-1-n)+` AS part, id, COALESCE(topic, ''), sharding_key, tag, status, `+schema.NextRetrySQL+` FROM `+s.table+hint+`
						WHERE sharding_key = ? AND id > ? AND id < ? AND COALESCE(topic, '') = ? AND status IN (0, 1) AND `+schema.NotDeletedSQL+`)`)
					args = append(args, k.key, ids[0], ids[len(ids)-1], k.topic)
				}
			}
			for n, w := range chunk {
				parts = append(parts, `(SELECT `+fmt.Sprint(n)+` AS part, id, COALESCE(topic, ''), sharding_key, tag, status, `+schema.NextRetrySQL+` FROM `+s.table+hint+`
					WHERE sharding_key = ? AND id < ? AND COALESCE(topic, '') = ? AND status IN (0, 1, 2) AND `+schema.NotDeletedSQL+`
					ORDER BY id DESC LIMIT `+fmt.Sprint(w.limit)+`)`)
				args = append(args, w.k.key, w.below, w.k.topic)
			}
			if len(parts) == 0 {
				break
			}
			got, err := s.checkRows(ctx, strings.Join(parts, "\nUNION ALL\n"), args)
			if err != nil {
				return nil, s.checkFailed(err)
			}
			if !innerDone && start == 0 {
				innerDone = true
				for n, k := range inner {
					in := streams[k]
					for _, r := range got[-1-n] {
						if _, found := slices.BinarySearch(in, r.id); found || r.key != k.key || r.topic != k.topic || !ordered(r.topic, r.tag) {
							continue
						}
						if h, ok := heads[k]; !ok || r.id < h.id {
							heads[k] = heldHead{id: r.id, dueMs: r.due}
						}
					}
				}
			}
			for n, w := range chunk {
				rs := got[n]
				decided := false
				for _, r := range rs { // newest first
					if r.key != w.k.key || r.topic != w.k.topic || !ordered(r.topic, r.tag) {
						// Another stream: a key or topic the table's collation holds
						// equal (another case, say), or a row of an unordered route.
						continue
					}
					decided = true
					if r.status != 2 {
						// An older unsent row: the stream's rows in the page all wait.
						heads[w.k] = heldHead{id: r.id, dueMs: r.due}
					}
					break
				}
				if !decided && len(rs) == w.limit {
					next = append(next, walk{k: w.k, below: rs[len(rs)-1].id, limit: w.limit * 8})
				}
			}
		}
		walks = next
	}
	return heads, nil
}

// checkFailed returns err of a statement of the ordered check, after forgetting the index
// it forced when the index was dropped since: the next check looks for it again.
func (s *store) checkFailed(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1176 { // ER_KEY_DOES_NOT_EXITS
		s.scanMu.Lock()
		s.checkHint, s.checkLooked = "", time.Time{}
		s.scanMu.Unlock()
	}
	return err
}

// checkNearestPerStatement bounds the streams whose nearest older row one statement reads.
const checkNearestPerStatement = 1000

// nearestOlder reads, for each stream of keys, its nearest row below the id in below that the
// walk would read first (of its topic, pending, failed or sent, not deleted), keyed by the
// stream's index. One statement
// per checkNearestPerStatement streams: a derived table of the streams, each with a
// correlated subquery that reads the (sharding_key, id) index backwards from its bound (one
// index dive per stream, however long the key's history), then the rows found by primary
// key. A union of one subquery per stream costs the server a plan per subquery: 8x the time.
func (s *store) nearestOlder(ctx context.Context, hint string, keys []orderKey, below []int64) (map[int]checkRow, error) {
	found := map[int]checkRow{}
	for start := 0; start < len(keys); start += checkNearestPerStatement {
		chunk := keys[start:min(start+checkNearestPerStatement, len(keys))]
		var q strings.Builder
		args := make([]any, 0, 4*len(chunk))
		q.WriteString("SELECT k.part, (SELECT m.id FROM " + s.table + " m" + hint + `
			WHERE m.sharding_key = k.sk AND m.id < k.below AND COALESCE(m.topic, '') = k.tp AND m.status IN (0, 1, 2) AND COALESCE(m.is_deleted, 0) = 0
			ORDER BY m.id DESC LIMIT 1) FROM (`)
		for i, k := range chunk {
			if i == 0 {
				q.WriteString("SELECT ? AS part, ? AS sk, ? AS tp, ? AS below")
			} else {
				q.WriteString(" UNION ALL SELECT ?, ?, ?, ?")
			}
			args = append(args, start+i, k.key, k.topic, below[start+i])
		}
		q.WriteString(") k")
		rows, err := s.query(ctx, q.String(), args...)
		if err != nil {
			return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.name, err)
		}
		byID := map[int64][]int{}
		var ids []any
		for rows.Next() {
			var part int
			var id sql.NullInt64
			if err := rows.Scan(&part, &id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.name, err)
			}
			if id.Valid {
				if _, dup := byID[id.Int64]; !dup {
					ids = append(ids, id.Int64)
				}
				byID[id.Int64] = append(byID[id.Int64], part)
			}
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.name, err)
		}
		if len(ids) == 0 {
			continue
		}
		got, err := s.checkRows(ctx, `SELECT 0, id, COALESCE(topic, ''), sharding_key, tag, status, `+schema.NextRetrySQL+` FROM `+s.table+`
			WHERE id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, ids)
		if err != nil {
			return nil, err
		}
		for _, r := range got[0] {
			for _, part := range byID[r.id] {
				found[part] = r
			}
		}
	}
	return found, nil
}

// orderedIndex returns the FORCE INDEX clause of the table's (sharding_key, id) index, or
// "" when it has none. A table without one is looked at again after a minute, so that a
// relay running while migrate adds it starts using it; a table whose index was dropped
// since is looked at again at once (orderedHeads).
func (s *store) orderedIndex(ctx context.Context) (string, error) {
	if err := s.scanIndex(ctx); err != nil {
		return "", err
	}
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	if s.checkHint == "" && time.Since(s.checkLooked) > time.Minute {
		hint, err := s.indexHint(ctx, "sharding_key,id")
		if err != nil {
			return "", err
		}
		s.checkHint, s.checkLooked = hint, time.Now()
	}
	return s.checkHint, nil
}

// checkRow is one row the ordered check read.
type checkRow struct {
	id, due         int64
	topic, key, tag string
	status          int
}

// checkRows runs one statement of the ordered check and groups its rows by subquery (the
// number each selects as part), in the order each subquery returned them.
func (s *store) checkRows(ctx context.Context, q string, args []any) (map[int][]checkRow, error) {
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.name, err)
	}
	defer rows.Close()
	out := map[int][]checkRow{}
	for rows.Next() {
		var part int
		var r checkRow
		var tag sql.NullString // NULL in an adopted table whose tag column allows it
		if err := rows.Scan(&part, &r.id, &r.topic, &r.key, &tag, &r.status, &r.due); err != nil {
			return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.name, err)
		}
		r.tag = tag.String
		out[part] = append(out[part], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.name, err)
	}
	return out, nil
}

// headsFromUnsent is orderedHeads on a table without the (sharding_key, id) index: the
// first unsent ordered row of each stream that is not in the page and comes before the
// page's last row of the stream.
func (s *store) headsFromUnsent(ctx context.Context, streams map[orderKey][]int64, ordered func(topic, tag string) bool) (map[orderKey]heldHead, error) {
	var keys []string
	seen := map[string]bool{}
	var maxID int64
	for k, ids := range streams {
		if !seen[k.key] {
			seen[k.key] = true
			keys = append(keys, k.key)
		}
		maxID = max(maxID, ids[len(ids)-1])
	}
	unsent, due, err := s.unsentUpTo(ctx, keys, maxID, ordered)
	if err != nil {
		return nil, err
	}
	heads := map[orderKey]heldHead{}
	for k, ids := range streams {
		last := ids[len(ids)-1]
		for _, id := range unsent[k] {
			if id >= last {
				break
			}
			if _, found := slices.BinarySearch(ids, id); !found {
				heads[k] = heldHead{id: id, dueMs: due[id]}
				break
			}
		}
	}
	return heads, nil
}
