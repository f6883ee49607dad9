// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"cmp"
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
// subqueries each, four on a (sharding_key, status, id) index: one per status), so that a
// page of 1,000 keys costs a few statements per round.
const checkStreamsPerStatement = 200

// checkFirstLimit is how many of a stream's older rows the check's first round reads below
// the page's; each further round, for the streams still undecided (their nearest older
// rows all of unordered routes), reads eight times as many.
const checkFirstLimit = 4

// HeldHead is the first unsent row of an ordered key, holding back the key's later rows, and
// when it is due (its next_retry_time, epoch ms).
type HeldHead struct{ ID, DueMs int64 }

// OrderedHeads returns, per ordered stream of a page (its rows' ids, ascending), the
// stream's unsent row that holds the page's rows of the stream back, with its due time:
// the page's rows of the stream after it wait. A stream absent from the map goes whole.
//
// The nearest older row of the stream decides (docs/decisions.md, "Ordered routes, stated
// exactly"), on every index layout alike. The check reads only that: each stream's nearest
// older row first, for all streams in one statement (nearestOlder), then, one statement per
// round for up to checkStreamsPerStatement streams, the stream's rows between its first and
// last row in the page (innerHeads), and, for the streams whose nearest row did not decide,
// their older rows, newest first, up to the first ordered one. Rows of other topics, of
// unordered routes (ordered(topic, tag) false), dead (and handed) and soft-deleted rows are
// skipped, as they neither hold nor free the stream. An unsent ordered row holds the
// stream; a sent one decides that nothing older does: an unsent row below it was committed
// (or requeued) after the stream had passed it, and goes on its own. Parked rows are unsent
// rows and hold like any. The rows are read by the (sharding_key, id) index, or, on an older
// table that has (sharding_key, status, id) instead, by that one once per status (checkIndex).
func (s *Store) OrderedHeads(ctx context.Context, streams map[OrderKey][]int64, ordered func(topic, tag string) bool) (map[OrderKey]HeldHead, error) {
	if len(streams) == 0 {
		return nil, nil
	}
	ix, err := s.orderedIndex(ctx)
	if err != nil {
		return nil, err
	}
	heads, err := s.headsBy(ctx, ix, streams, ordered)
	if s.indexGone(err) {
		// The forced index was dropped since it was found. When the table has the other
		// one now (migrate swaps them in one ALTER), the check reads by it at once; a
		// table left with neither fails this check, and the next reads unforced.
		if again, lerr := s.orderedIndex(ctx); lerr == nil && again.hint != "" && again != ix {
			return s.headsBy(ctx, again, streams, ordered)
		}
	}
	return heads, err
}

// headsBy is orderedHeads reading by the index ix.
func (s *Store) headsBy(ctx context.Context, ix checkIndex, streams map[OrderKey][]int64, ordered func(topic, tag string) bool) (map[OrderKey]HeldHead, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	heads := map[OrderKey]HeldHead{}
	walks := make([]walk, 0, len(streams))
	inner := make([]OrderKey, 0, len(streams))
	for k, ids := range streams {
		walks = append(walks, walk{k: k, below: ids[0], limit: checkFirstLimit})
		if len(ids) > 1 {
			inner = append(inner, k)
		}
	}
	// A stable order, for statements that read alike from page to page.
	slices.SortFunc(walks, func(a, b walk) int { return strings.Compare(a.k.Key+"\x00"+a.k.Topic, b.k.Key+"\x00"+b.k.Topic) })
	// The first round: each stream's nearest older row, in one statement for many streams.
	// The row decides when it is of the stream and of an ordered route; the streams it does
	// not decide walk on below it.
	keys, bounds := make([]OrderKey, len(walks)), make([]int64, len(walks))
	for n, w := range walks {
		keys[n], bounds[n] = w.k, w.below
	}
	nearest, err := s.nearestOlder(ctx, ix, keys, bounds)
	if err != nil {
		return nil, err
	}
	undecided := walks[:0]
	for n, w := range walks {
		r, found := nearest[n]
		switch {
		case !found:
			// No older row of the stream at all: nothing holds it.
		case r.key == w.k.Key && r.topic == w.k.Topic && ordered(r.topic, r.tag):
			if r.status != 2 {
				heads[w.k] = HeldHead{ID: r.id, DueMs: r.due}
			}
		default:
			undecided = append(undecided, walk{k: w.k, below: r.id, limit: checkFirstLimit * 8})
		}
	}
	if err := s.walkOlder(ctx, ix, undecided, streams, inner, ordered, heads); err != nil {
		return nil, err
	}
	return heads, nil
}

// walk is one stream's read of the ordered check: limit of its rows with ids below below.
type walk struct {
	k     OrderKey
	below int64
	limit int
}

// walkOlder adds to heads what the rounds after the first decide: the unsent rows between
// the first and last rows in the page of the streams of inner, and the older rows of the
// streams of walks, whose nearest older row did not decide, each round reading eight times
// as many rows further down for the streams still undecided.
func (s *Store) walkOlder(ctx context.Context, ix checkIndex, walks []walk, streams map[OrderKey][]int64, inner []OrderKey, ordered func(topic, tag string) bool, heads map[OrderKey]HeldHead) error {
	innerDone := len(inner) == 0
	for len(walks) > 0 || !innerDone {
		var next []walk
		for start := 0; start < max(len(walks), 1); start += checkStreamsPerStatement {
			chunk := walks[start:min(start+checkStreamsPerStatement, len(walks))]
			var parts []string
			var args []any
			readInner := !innerDone && start == 0
			if readInner {
				// The rows between a stream's first and last row in the page: an unsent
				// one not in the page that is the nearest older row of a page's row
				// holds it (a gap in the page's run of the stream).
				for n, k := range inner {
					ids := streams[k]
					parts = append(parts, `(SELECT `+fmt.Sprint(-1-n)+` AS part, id, COALESCE(topic, ''), sharding_key, tag, status, `+schema.NextRetrySQL+` FROM `+s.Table+ix.hint+`
						WHERE sharding_key = ? AND id > ? AND id < ? AND COALESCE(topic, '') = ? AND status IN (0, 1, 2) AND `+schema.NotDeletedSQL+`)`)
					args = append(args, k.Key, ids[0], ids[len(ids)-1], k.Topic)
				}
				innerDone = true
			}
			for n, w := range chunk {
				p, a := s.olderParts(ix, n, w)
				parts, args = append(parts, p...), append(args, a...)
			}
			if len(parts) == 0 {
				break
			}
			got, err := s.checkRows(ctx, strings.Join(parts, "\nUNION ALL\n"), args)
			if err != nil {
				return err
			}
			if readInner {
				innerHeads(streams, inner, got, ordered, heads)
			}
			for n, w := range chunk {
				if rest, undecided := decideOlder(w, newestFirst(got[n], w.limit), ordered, heads); undecided {
					next = append(next, rest)
				}
			}
		}
		walks = next
	}
	return nil
}

// innerHeads adds to heads, per stream of inner, the first of its rows between the stream's
// rows in the page (got[-1-n], for inner[n]) that holds one of them: the nearest older
// ordered row of a page's row, unsent and not in the page. Below a sent row, an unsent one
// holds nothing (a late row). The page's rows of the stream after a held one wait with it.
func innerHeads(streams map[OrderKey][]int64, inner []OrderKey, got map[int][]checkRow, ordered func(topic, tag string) bool, heads map[OrderKey]HeldHead) {
	for n, k := range inner {
		if _, held := heads[k]; held {
			continue // held below its first row in the page already
		}
		in := streams[k]
		rs := got[-1-n]
		slices.SortFunc(rs, func(a, b checkRow) int { return cmp.Compare(a.id, b.id) })
		// holding is the first of the unsent ordered rows not in the page since the last row
		// of the page or sent row of the stream.
		var holding *checkRow
	rows:
		for i := range rs {
			r := &rs[i]
			if r.key != k.Key || r.topic != k.Topic || !ordered(r.topic, r.tag) {
				continue
			}
			_, inPage := slices.BinarySearch(in, r.id)
			switch {
			case inPage && holding != nil:
				break rows
			case inPage || r.status == 2:
				holding = nil
			case holding == nil:
				holding = r
			}
		}
		if holding != nil { // holds the next row in the page, the last one at least
			heads[k] = HeldHead{ID: holding.id, DueMs: holding.due}
		}
	}
}

// decideOlder decides w's stream by rs, the stream's rows below w.below newest first (at most
// w.limit): its first row of the stream and of an ordered route holds the stream when unsent,
// and frees it when sent. A stream that rs leaves undecided walks on below them, when rs
// was a full read.
func decideOlder(w walk, rs []checkRow, ordered func(topic, tag string) bool, heads map[OrderKey]HeldHead) (walk, bool) {
	for _, r := range rs {
		if r.key != w.k.Key || r.topic != w.k.Topic || !ordered(r.topic, r.tag) {
			// Another stream: a key or topic the table's collation holds equal (another
			// case, say), or a row of an unordered route.
			continue
		}
		if r.status != 2 {
			// An older unsent row: the stream's rows in the page all wait.
			heads[w.k] = HeldHead{ID: r.id, DueMs: r.due}
		}
		return walk{}, false
	}
	if len(rs) == w.limit {
		return walk{k: w.k, below: rs[len(rs)-1].id, limit: w.limit * 8}, true
	}
	return walk{}, false
}

// newestFirst returns the limit newest of rs: a stream's rows as one read of them per status
// returned them, merged.
func newestFirst(rs []checkRow, limit int) []checkRow {
	slices.SortFunc(rs, func(a, b checkRow) int { return cmp.Compare(b.id, a.id) })
	return rs[:min(len(rs), limit)]
}

// checkIndex is the index the ordered check reads a stream's rows by: hint forces the
// table's (sharding_key, id) index, or, with byStatus, its (sharding_key, status, id) index
// (an older table's), which gives a stream's rows in id order within one status only, so
// the check reads it once per status and merges. Unforced, MariaDB plans a status's read
// on another index when its statistics say the status is rare (a filesort of that status's
// rows). A table with neither reads unforced.
type checkIndex struct {
	hint     string
	byStatus bool
}

// checkStatuses are the statuses of the rows that may decide a stream: pending, failed, sent.
var checkStatuses = []string{"0", "1", "2"}

// olderParts returns the subqueries (one, or one per status on a byStatus index) that read
// w.limit of w's stream's rows below w.below, newest first, each selecting part, and their
// arguments.
func (s *Store) olderParts(ix checkIndex, part int, w walk) ([]string, []any) {
	statuses := []string{"IN (" + strings.Join(checkStatuses, ", ") + ")"}
	if ix.byStatus {
		statuses = nil
		for _, st := range checkStatuses {
			statuses = append(statuses, "= "+st)
		}
	}
	var parts []string
	var args []any
	for _, st := range statuses {
		parts = append(parts, `(SELECT `+fmt.Sprint(part)+` AS part, id, COALESCE(topic, ''), sharding_key, tag, status, `+schema.NextRetrySQL+` FROM `+s.Table+ix.hint+`
			WHERE sharding_key = ? AND id < ? AND COALESCE(topic, '') = ? AND status `+st+` AND `+schema.NotDeletedSQL+`
			ORDER BY id DESC LIMIT `+fmt.Sprint(w.limit)+`)`)
		args = append(args, w.k.Key, w.below, w.k.Topic)
	}
	return parts, args
}

// indexGone reports whether err, of a statement of the ordered check, says that the index
// it forced was dropped since, after forgetting that index: the check looks for one again.
func (s *Store) indexGone(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1176 { // ER_KEY_DOES_NOT_EXITS
		return false
	}
	s.scanMu.Lock()
	s.checkHint, s.checkStatusHint, s.checkLooked = "", "", time.Time{}
	s.scanMu.Unlock()
	return true
}

// checkNearestPerStatement bounds the streams whose nearest older row one statement reads.
const checkNearestPerStatement = 1000

// nearestOlder reads, for each stream of keys, its nearest row below the id in below that the
// walk would read first (of its topic, pending, failed or sent, not deleted), keyed by the
// stream's index. One statement
// per checkNearestPerStatement streams: a derived table of the streams, each with a
// correlated subquery that reads the (sharding_key, id) index backwards from its bound (one
// index dive per stream, however long the key's history; one per status, the greatest
// taken, on a (sharding_key, status, id) index), then the rows found by primary key. A
// union of one subquery per stream costs the server a plan per subquery: 8x the time.
func (s *Store) nearestOlder(ctx context.Context, ix checkIndex, keys []OrderKey, below []int64) (map[int]checkRow, error) {
	dive := func(status string) string {
		return "(SELECT m.id FROM " + s.Table + " m" + ix.hint + `
			WHERE m.sharding_key = k.sk AND m.id < k.below AND COALESCE(m.topic, '') = k.tp AND m.status ` + status + ` AND COALESCE(m.is_deleted, 0) = 0
			ORDER BY m.id DESC LIMIT 1)`
	}
	nearest := dive("IN (" + strings.Join(checkStatuses, ", ") + ")")
	if ix.byStatus {
		var dives []string
		for _, st := range checkStatuses {
			dives = append(dives, "COALESCE("+dive("= "+st)+", 0)")
		}
		nearest = "NULLIF(GREATEST(" + strings.Join(dives, ", ") + "), 0)"
	}
	found := map[int]checkRow{}
	for start := 0; start < len(keys); start += checkNearestPerStatement {
		chunk := keys[start:min(start+checkNearestPerStatement, len(keys))]
		var q strings.Builder
		args := make([]any, 0, 4*len(chunk))
		q.WriteString("SELECT k.part, " + nearest + " FROM (")
		for i, k := range chunk {
			if i == 0 {
				q.WriteString("SELECT ? AS part, ? AS sk, ? AS tp, ? AS below")
			} else {
				q.WriteString(" UNION ALL SELECT ?, ?, ?, ?")
			}
			args = append(args, start+i, k.Key, k.Topic, below[start+i])
		}
		q.WriteString(") k")
		rows, err := s.Query(ctx, q.String(), args...)
		if err != nil {
			return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.Name, err)
		}
		byID := map[int64][]int{}
		var ids []any
		for rows.Next() {
			var part int
			var id sql.NullInt64
			if err := rows.Scan(&part, &id); err != nil {
				rows.Close()
				return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.Name, err)
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
			return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.Name, err)
		}
		if len(ids) == 0 {
			continue
		}
		got, err := s.checkRows(ctx, `SELECT 0, id, COALESCE(topic, ''), sharding_key, tag, status, `+schema.NextRetrySQL+` FROM `+s.Table+`
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

// orderedIndex returns the index the ordered check reads by: the table's (sharding_key, id)
// index, or else its (sharding_key, status, id) one. A table without the first is looked at
// again after a minute, so that a relay running while migrate adds it starts using it; a
// table whose index was dropped since is looked at again at once (indexGone).
func (s *Store) orderedIndex(ctx context.Context) (checkIndex, error) {
	if err := s.ScanIndex(ctx); err != nil {
		return checkIndex{}, err
	}
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	if s.checkHint == "" && time.Since(s.checkLooked) > time.Minute {
		if err := s.lookCheckIndex(ctx); err != nil {
			return checkIndex{}, err
		}
	}
	if s.checkHint != "" {
		return checkIndex{hint: s.checkHint}, nil
	}
	return checkIndex{hint: s.checkStatusHint, byStatus: s.checkStatusHint != ""}, nil
}

// lookCheckIndex finds the ordered check's indexes (orderedIndex); the caller holds scanMu.
func (s *Store) lookCheckIndex(ctx context.Context) error {
	hint, err := s.indexHint(ctx, "sharding_key,id")
	if err != nil {
		return err
	}
	status := ""
	if hint == "" {
		if status, err = s.indexHint(ctx, "sharding_key,status,id"); err != nil {
			return err
		}
	}
	s.checkHint, s.checkStatusHint, s.checkLooked = hint, status, time.Now()
	return nil
}

// checkRow is one row the ordered check read.
type checkRow struct {
	id, due         int64
	topic, key, tag string
	status          int
}

// checkRows runs one statement of the ordered check and groups its rows by subquery (the
// number each selects as part), in the order each subquery returned them.
func (s *Store) checkRows(ctx context.Context, q string, args []any) (map[int][]checkRow, error) {
	rows, err := s.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.Name, err)
	}
	defer rows.Close()
	out := map[int][]checkRow{}
	for rows.Next() {
		var part int
		var r checkRow
		var tag sql.NullString // NULL in an adopted table whose tag column allows it
		if err := rows.Scan(&part, &r.id, &r.topic, &r.key, &tag, &r.status, &r.due); err != nil {
			return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.Name, err)
		}
		r.tag = tag.String
		out[part] = append(out[part], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the older rows of ordered keys in %s: %w", s.Name, err)
	}
	return out, nil
}
