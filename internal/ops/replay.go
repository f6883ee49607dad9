// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Replay's reads: the rows an operator re-publishes (outbox-relay replay, the dashboard's
// replay). They are plain consistent reads that walk the primary key in bounded windows of
// ids, never a locking read and never a write: a replay changes no row.
const (
	// sqlReplayBounds reads the table's lowest and highest id: two dives into the primary key.
	sqlReplayBounds = "SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM {T}"

	// sqlReplayNextID finds the first id after a window, so that a walk skips a gap of ids
	// in one seek instead of one empty window after another.
	sqlReplayNextID = "SELECT COALESCE(MIN(id), 0) FROM {T} WHERE id > ?"

	// sqlReplayCount counts the selected rows of one window of ids: a range of the primary
	// key, each row read for the filter.
	sqlReplayCount = "SELECT COUNT(*) FROM {T} FORCE INDEX (PRIMARY) WHERE id > ? AND id <= ? AND {S}{W}"

	// sqlReplayPage reads the next selected rows of one window of ids, in id order.
	sqlReplayPage = "SELECT id, COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, ''), COALESCE(content, '')," +
		" COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), COALESCE(properties, ''), status" +
		" FROM {T} FORCE INDEX (PRIMARY) WHERE id > ? AND id <= ? AND {S}{W} ORDER BY id LIMIT ?"

	// sqlReplayByMsgID resolves a chunk of a msg_id list to the ids of its selected rows:
	// lookups in the unique key uk_msg_id.
	sqlReplayByMsgID = "SELECT id FROM {T} WHERE msg_id IN ({IDS}) AND id > ? AND id <= ? AND {S}{W}"

	// sqlReplayByIDs reads the rows of a chunk of ids (a resolved msg_id list), in id order.
	sqlReplayByIDs = "SELECT id, COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, ''), COALESCE(content, '')," +
		" COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), COALESCE(properties, ''), status" +
		" FROM {T} FORCE INDEX (PRIMARY) WHERE id IN ({IDS}) AND {S}{W} ORDER BY id"
)

// ReplayWindow is the most ids one replay statement ranges over: each statement's cost is
// bounded by it whatever the filter selects.
const ReplayWindow = 20000

// replayWindow is ReplayWindow; tests lower it.
var replayWindow int64 = ReplayWindow

// MaxReplayMsgIDs is the most msg_ids one replay takes (a list file or arguments).
const MaxReplayMsgIDs = 1_000_000

// ReplayFilter chooses the rows a replay re-publishes: sent rows (status 2, and handed rows,
// status 4, with IncludeHanded) matching every condition set. The zero filter selects every
// sent row.
type ReplayFilter struct {
	// SentFrom and SentTo bound sent_time, the broker's acknowledgement (epoch ms in the
	// table): SentFrom included, SentTo excluded; zero is open. A handed row's time is its
	// next_retry_time, when it was handed.
	SentFrom, SentTo time.Time
	// Topic and Tag are exact.
	Topic, Tag string
	// Key is one key of msg_keys (space-separated), or the msg_id of a row without keys.
	Key string
	// ShardingKey is exact.
	ShardingKey string
	// FromID and ToID bound id, both included; zero is open.
	FromID, ToID int64
	// MsgIDs, when set, select those rows only (the other conditions still apply).
	MsgIDs []string
	// IncludeHanded selects handed rows (status 4) too.
	IncludeHanded bool
}

// Check reports the first thing wrong with f, in words an operator can act on.
func (f ReplayFilter) Check() error {
	switch {
	case !f.SentFrom.IsZero() && !f.SentTo.IsZero() && !f.SentFrom.Before(f.SentTo):
		return fmt.Errorf("the time range is empty: --since %s is not before --until %s", f.SentFrom.Format(time.RFC3339), f.SentTo.Format(time.RFC3339))
	case f.FromID < 0 || f.ToID < 0:
		return errors.New("ids are positive: --from-id and --to-id take a row's id")
	case f.ToID != 0 && f.FromID > f.ToID:
		return fmt.Errorf("the id range is empty: --from-id %d is above --to-id %d", f.FromID, f.ToID)
	case strings.ContainsAny(f.Key, " \t\r\n"):
		return errors.New("a key holds no space: give one key of msg_keys")
	case len(f.MsgIDs) > MaxReplayMsgIDs:
		return fmt.Errorf("%d msg_ids given, more than %d: split the list", len(f.MsgIDs), MaxReplayMsgIDs)
	}
	if f.Topic != "" {
		if err := outbox.ValidateTopic(f.Topic); err != nil {
			return fmt.Errorf("--topic: %w", err)
		}
	}
	if f.Tag != "" {
		if err := outbox.ValidateTag(f.Tag); err != nil {
			return fmt.Errorf("--tag: %w", err)
		}
	}
	for i, id := range f.MsgIDs {
		if id == "" || strings.ContainsAny(id, " \t\r\n") || len(id) > 64 {
			return fmt.Errorf("msg_id %d of the list (%q) is not a msg_id: 1 to 64 characters, no spaces", i+1, id)
		}
	}
	return nil
}

// statuses is the filter's status condition.
func (f ReplayFilter) statuses() string {
	if f.IncludeHanded {
		return "status IN (2, 4)"
	}
	return "status = 2"
}

// where returns the filter's conditions other than status, ids and msg_ids, each starting
// with " AND ".
func (f ReplayFilter) where() (string, []any) {
	var w strings.Builder
	var args []any
	add := func(cond string, a ...any) { w.WriteString(" AND " + cond); args = append(args, a...) }
	sent := "sent_time"
	if f.IncludeHanded {
		sent = "IF(status = 4, next_retry_time, sent_time)"
	}
	if !f.SentFrom.IsZero() {
		add(sent+" >= ?", f.SentFrom.UnixMilli())
	}
	if !f.SentTo.IsZero() {
		add(sent+" < ?", f.SentTo.UnixMilli())
	}
	if f.Topic != "" {
		add("topic = ?", f.Topic)
	}
	if f.Tag != "" {
		add("tag = ?", f.Tag)
	}
	if f.Key != "" {
		add("(CONCAT(' ', msg_keys, ' ') LIKE ? ESCAPE '!' OR (msg_keys = '' AND msg_id = ?))",
			"% "+likeEscaper.Replace(f.Key)+" %", f.Key)
	}
	if f.ShardingKey != "" {
		add("sharding_key = ?", f.ShardingKey)
	}
	return w.String(), args
}

// replayQuery fills {T}, {S} and {W} of stmt for f.
func replayQuery(stmt, table string, f ReplayFilter) (string, []any, error) {
	q, err := query(stmt, table)
	if err != nil {
		return "", nil, err
	}
	w, args := f.where()
	return strings.NewReplacer("{S}", f.statuses(), "{W}", w).Replace(q), args, nil
}

// ReplayRow is a selected row as a replay re-publishes it.
type ReplayRow struct {
	ID                int64
	MsgID, Topic, Tag string
	Body              []byte
	// Keys is msg_keys as stored (space-separated).
	Keys        string
	ShardingKey string
	// Properties is the properties column as stored ("" for NULL).
	Properties string
	Status     outbox.Status
}

// ReplayReader walks the rows a ReplayFilter selects in id order, a page at a time, so that
// a replay holds one page in memory, never its whole selection.
type ReplayReader struct {
	db     *sql.DB
	table  string
	f      ReplayFilter
	after  int64   // the last id read
	end    int64   // the last id of the walk, fixed when the reader is made
	ids    []int64 // a msg_id list's selected ids, sorted; nil without a list
	listed bool
}

// NewReplayReader checks f and returns a reader of table's selected rows with ids above
// after (0: from the start). The walk ends at the table's highest id as of now, or f.ToID:
// rows written later are not chased. A msg_id list is resolved to ids here, by the unique key.
func NewReplayReader(ctx context.Context, db *sql.DB, table string, f ReplayFilter, after int64) (*ReplayReader, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	q, err := query(sqlReplayBounds, table)
	if err != nil {
		return nil, err
	}
	var lo, hi int64
	if err := db.QueryRowContext(ctx, q).Scan(&lo, &hi); err != nil {
		return nil, fmt.Errorf("read the id range of %s: %w", table, err)
	}
	r := &ReplayReader{db: db, table: table, f: f, after: max(after, lo-1, f.FromID-1), end: hi}
	if f.ToID != 0 {
		r.end = min(hi, f.ToID)
	}
	if f.MsgIDs != nil {
		if err := r.resolve(ctx); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// resolve turns the msg_id list into the sorted ids of its selected rows.
func (r *ReplayReader) resolve(ctx context.Context) error {
	r.listed, r.ids = true, []int64{}
	list := slices.Clone(r.f.MsgIDs)
	slices.Sort(list)
	list = slices.Compact(list)
	for chunk := range slices.Chunk(list, 500) {
		q, args, err := replayQuery(sqlReplayByMsgID, r.table, r.f)
		if err != nil {
			return err
		}
		q = strings.Replace(q, "{IDS}", placeholders(len(chunk)), 1)
		all := make([]any, 0, len(chunk)+2+len(args))
		for _, id := range chunk {
			all = append(all, id)
		}
		all = append(append(all, r.after, r.end), args...)
		ids, err := queryIDs(ctx, r.db, q, all...)
		if err != nil {
			return fmt.Errorf("look up the msg_ids in %s: %w", r.table, err)
		}
		r.ids = append(r.ids, ids...)
	}
	slices.Sort(r.ids)
	return nil
}

func queryIDs(ctx context.Context, db *sql.DB, q string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, closeRows(rows)
}

// After is the id of the last row read: a run stopped after it is resumed by a reader made
// with it.
func (r *ReplayReader) After() int64 { return r.after }

// End is the highest id of the walk, fixed when the reader was made.
func (r *ReplayReader) End() int64 { return r.end }

// Count counts the rows the reader has still to read, without moving it: the dry run.
func (r *ReplayReader) Count(ctx context.Context) (int64, error) {
	if r.listed {
		i, _ := slices.BinarySearch(r.ids, r.after+1)
		return int64(len(r.ids) - i), nil
	}
	q, args, err := replayQuery(sqlReplayCount, r.table, r.f)
	if err != nil {
		return 0, err
	}
	var total int64
	for lo := r.after; lo < r.end; {
		hi := min(lo+replayWindow, r.end)
		var n int64
		if err := r.db.QueryRowContext(ctx, q, append([]any{lo, hi}, args...)...).Scan(&n); err != nil {
			return 0, fmt.Errorf("count the rows to replay in %s (ids %d-%d): %w", r.table, lo+1, hi, err)
		}
		total += n
		if lo, err = r.skipGap(ctx, hi); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// skipGap returns where the walk goes on after the window ending at hi: just before the next
// id present, or the end.
func (r *ReplayReader) skipGap(ctx context.Context, hi int64) (int64, error) {
	if hi >= r.end {
		return r.end, nil
	}
	q, err := query(sqlReplayNextID, r.table)
	if err != nil {
		return 0, err
	}
	var next int64
	if err := r.db.QueryRowContext(ctx, q, hi).Scan(&next); err != nil {
		return 0, fmt.Errorf("find the next id of %s after %d: %w", r.table, hi, err)
	}
	if next == 0 || next > r.end {
		return r.end, nil
	}
	return max(hi, next-1), nil
}

// Next returns up to limit more selected rows in id order, or none when the walk is done.
func (r *ReplayReader) Next(ctx context.Context, limit int) ([]ReplayRow, error) {
	if limit <= 0 {
		limit = 100
	}
	if r.listed {
		return r.nextListed(ctx, limit)
	}
	q, args, err := replayQuery(sqlReplayPage, r.table, r.f)
	if err != nil {
		return nil, err
	}
	for r.after < r.end {
		hi := min(r.after+replayWindow, r.end)
		rows, err := r.read(ctx, q, append(append([]any{r.after, hi}, args...), limit)...)
		if err != nil {
			return nil, fmt.Errorf("read the rows to replay in %s (ids %d-%d): %w", r.table, r.after+1, hi, err)
		}
		if len(rows) == limit {
			r.after = rows[len(rows)-1].ID
			return rows, nil
		}
		if r.after, err = r.skipGap(ctx, hi); err != nil {
			return nil, err
		}
		if len(rows) > 0 {
			return rows, nil
		}
	}
	return nil, nil
}

// nextListed reads the next rows of a resolved msg_id list (a chunk whose rows all left the
// selection since, purged, is passed over).
func (r *ReplayReader) nextListed(ctx context.Context, limit int) ([]ReplayRow, error) {
	q, args, err := replayQuery(sqlReplayByIDs, r.table, r.f)
	if err != nil {
		return nil, err
	}
	for {
		i, _ := slices.BinarySearch(r.ids, r.after+1)
		if i == len(r.ids) {
			r.after = r.end
			return nil, nil
		}
		chunk := r.ids[i:min(i+limit, len(r.ids))]
		all := make([]any, 0, len(chunk)+len(args))
		for _, id := range chunk {
			all = append(all, id)
		}
		rows, err := r.read(ctx, strings.Replace(q, "{IDS}", placeholders(len(chunk)), 1), append(all, args...)...)
		if err != nil {
			return nil, fmt.Errorf("read the listed rows to replay in %s: %w", r.table, err)
		}
		r.after = chunk[len(chunk)-1]
		if len(rows) > 0 {
			return rows, nil
		}
	}
}

// read runs a page query.
func (r *ReplayReader) read(ctx context.Context, q string, args ...any) ([]ReplayRow, error) {
	rows, err := r.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []ReplayRow
	for rows.Next() {
		var rr ReplayRow
		var st int
		if err := rows.Scan(&rr.ID, &rr.MsgID, &rr.Topic, &rr.Tag, &rr.Body, &rr.Keys, &rr.ShardingKey, &rr.Properties, &st); err != nil {
			rows.Close()
			return nil, err
		}
		rr.Status = outbox.Status(st)
		out = append(out, rr)
	}
	return out, closeRows(rows)
}
