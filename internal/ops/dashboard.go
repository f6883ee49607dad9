// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// The operations of the dashboard (internal/dashboard) that the CLI does not have: a richer
// selection of dead rows, one dead row's body, the table's recent activity and the holder of
// its lock.

// DeadQuery selects dead rows: the conditions of Filter plus the failure reason and a window
// on when the rows died. Its conditions are ANDed.
type DeadQuery struct {
	Filter
	// Reason selects rows whose fail_reason contains this text (case as the column's
	// collation compares it: insensitive by default). Wildcards are matched literally.
	Reason string
	// DiedAfter and DiedBefore bound update_time, the time the row died; a zero time leaves
	// that side open.
	DiedAfter, DiedBefore time.Time
}

// onlyFilter reports whether q has no condition beyond its Filter's.
func (q DeadQuery) onlyFilter() bool {
	return q.Reason == "" && q.DiedAfter.IsZero() && q.DiedBefore.IsZero()
}

var likeEscaper = strings.NewReplacer("!", "!!", "%", "!%", "_", "!_")

func (q DeadQuery) where() (string, []any) {
	w, args := q.Filter.where()
	if q.Reason != "" {
		w += " AND fail_reason LIKE ? ESCAPE '!'"
		args = append(args, "%"+likeEscaper.Replace(q.Reason)+"%")
	}
	if !q.DiedAfter.IsZero() {
		w += " AND update_time >= FROM_UNIXTIME(?)"
		args = append(args, q.DiedAfter.Unix())
	}
	if !q.DiedBefore.IsZero() {
		w += " AND update_time < FROM_UNIXTIME(?)"
		args = append(args, q.DiedBefore.Unix())
	}
	return w, args
}

// tableQuery fills {T} (validated) and {W} with q's conditions.
func (q DeadQuery) tableQuery(stmt, table string) (string, []any, error) {
	s, err := query(stmt, table)
	if err != nil {
		return "", nil, err
	}
	w, args := q.where()
	return strings.Replace(s, "{W}", w, 1), args, nil
}

// DeadSearch is DeadList with a DeadQuery: up to limit dead rows matching q, oldest id first,
// after id afterID. limit <= 0 means DefaultListLimit.
func DeadSearch(ctx context.Context, db *sql.DB, table string, q DeadQuery, afterID int64, limit int) ([]DeadMessage, error) {
	if q.onlyFilter() {
		return DeadList(ctx, db, table, q.Filter, afterID, limit)
	}
	if limit <= 0 {
		limit = DefaultListLimit
	}
	s, args, err := q.tableQuery(sqlDeadPage, table)
	if err != nil {
		return nil, err
	}
	_, msgIDs, err := deadPage(ctx, db, s, args, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list dead rows of %s: %w", table, err)
	}
	if len(msgIDs) == 0 {
		return []DeadMessage{}, nil
	}
	return DeadList(ctx, db, table, Filter{MsgIDs: msgIDs}, 0, limit)
}

// CountDeadQuery returns how many dead rows match q.
func CountDeadQuery(ctx context.Context, db *sql.DB, table string, q DeadQuery) (int64, error) {
	s, args, err := q.tableQuery(sqlCountDead, table)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := db.QueryRowContext(ctx, s, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count dead rows of %s: %w", table, err)
	}
	return n, nil
}

// RequeueQuery requeues the dead rows matching q, as Requeue does (an empty q requires
// q.All). The selection beyond Filter's is resolved to msg_ids a page at a time, and each
// page goes through Requeue, which only changes rows still dead when it locks them.
func RequeueQuery(ctx context.Context, db *sql.DB, table string, q DeadQuery) (RequeueResult, error) {
	if q.onlyFilter() {
		return Requeue(ctx, db, table, q.Filter)
	}
	res := RequeueResult{Table: table, Requeued: []string{}}
	s, args, err := q.tableQuery(sqlDeadPage, table)
	if err != nil {
		return res, err
	}
	var after int64
	for {
		ids, msgIDs, err := deadPage(ctx, db, s, args, after, requeueChunk)
		if err != nil {
			return res, fmt.Errorf("requeue dead rows of %s: %w", table, err)
		}
		if len(ids) == 0 {
			return res, nil
		}
		r, err := Requeue(ctx, db, table, Filter{MsgIDs: msgIDs})
		res.Requeued = append(res.Requeued, r.Requeued...)
		for id, why := range r.Skipped { // changed between the page and the requeue
			if res.Skipped == nil {
				res.Skipped = map[string]string{}
			}
			res.Skipped[id] = why
		}
		if err != nil {
			return res, err
		}
		after = ids[len(ids)-1]
	}
}

// deadPage runs a sqlDeadPage query: up to limit (id, msg_id) after id after.
func deadPage(ctx context.Context, db *sql.DB, s string, args []any, after int64, limit int) ([]int64, []string, error) {
	rows, err := db.QueryContext(ctx, s, append(append([]any{}, args...), after, limit)...)
	if err != nil {
		return nil, nil, err
	}
	var ids []int64
	var msgIDs []string
	for rows.Next() {
		var id int64
		var msgID string
		if err := rows.Scan(&id, &msgID); err != nil {
			rows.Close()
			return nil, nil, err
		}
		ids, msgIDs = append(ids, id), append(msgIDs, msgID)
	}
	return ids, msgIDs, closeRows(rows)
}

// ErrNotDead is returned by DeadBody for a row that does not exist or is not dead.
var ErrNotDead = errors.New("no dead message with this id")

// DeadDetail is one dead row with its body.
type DeadDetail struct {
	DeadMessage
	// Content is the body, cut to the length asked for; Truncated says whether it was.
	Content   string `json:"content"`
	Truncated bool   `json:"truncated"`
	// Properties is the row's properties column (a JSON object), or "".
	Properties string `json:"properties"`
}

// DeadBody returns the dead row id of table with up to maxChars characters of its body.
func DeadBody(ctx context.Context, db *sql.DB, table string, id int64, maxChars int) (DeadDetail, error) {
	var d DeadDetail
	s, err := query(sqlDeadBody, table)
	if err != nil {
		return d, err
	}
	var created, updated int64
	err = db.QueryRowContext(ctx, s, maxChars, id).Scan(&d.ID, &d.MsgID, &d.Topic, &d.Tag, &d.FailReason,
		&d.Content, &d.ContentChars, &d.Properties, &d.MsgKeys, &d.ShardingKey, &d.RetryCount, &d.MaxRetryCount,
		&created, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return d, ErrNotDead
	}
	if err != nil {
		return d, fmt.Errorf("read dead row %d of %s: %w", id, table, err)
	}
	d.CreateTime, d.UpdateTime = time.Unix(created, 0).UTC(), time.Unix(updated, 0).UTC()
	d.Truncated = d.ContentChars > int64(len([]rune(d.Content)))
	return d, nil
}

// Activity is how many rows of a table reached each outcome in a span of time, by their
// update_time: sent, failed (waiting for a retry at the time of counting) and dead.
type Activity struct {
	// Start is the span's start, epoch seconds of the database clock.
	Start  int64 `json:"start"`
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
	Dead   int64 `json:"dead"`
}

// RecentActivity counts the rows of table that reached status sent, failed or dead in
// [from, to) (epoch seconds, database clock; see DBClock), in consecutive buckets of width
// seconds starting at from: sent and dead rows by when they were settled (their
// next_retry_time, epoch ms: the relay writes it with sent_time, from its own clock), failed
// rows by their update_time. It reads the (status, next_retry_time) index: the sent and dead
// rows settled in the span from the index alone, and the failed rows. A row counts under the
// status it has when counted, so a row that failed and was then sent counts as sent. Rows
// settled by a writer that leaves next_retry_time alone (an older relay) are not counted.
func RecentActivity(ctx context.Context, db *sql.DB, table string, from, to, width int64) ([]Activity, error) {
	if width <= 0 || to <= from {
		return nil, fmt.Errorf("activity of %s: bad span [%d, %d) by %d", table, from, to, width)
	}
	s, err := scanQuery(ctx, db, sqlActivity, table)
	if err != nil {
		return nil, fmt.Errorf("activity of %s: %w", table, err)
	}
	out := make([]Activity, (to-from+width-1)/width)
	for i := range out {
		out[i].Start = from + int64(i)*width
	}
	rows, err := db.QueryContext(ctx, s, from, width, from, to, from, width, from, to)
	if err != nil {
		return nil, fmt.Errorf("activity of %s: %w", table, err)
	}
	for rows.Next() {
		var st int
		var bucket, n int64
		if err := rows.Scan(&st, &bucket, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("activity of %s: %w", table, err)
		}
		if bucket < 0 || bucket >= int64(len(out)) {
			continue // a clock step between the bounds and the scan
		}
		switch outbox.Status(st) {
		case outbox.StatusSent:
			out[bucket].Sent += n
		case outbox.StatusFailed:
			out[bucket].Failed += n
		case outbox.StatusDead:
			out[bucket].Dead += n
		}
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("activity of %s: %w", table, err)
	}
	return out, nil
}

// DBNow returns the database's clock, to the millisecond: the clock every age and due time
// is measured on (create_time is written by it), so that a host whose clock is off reports
// true ages.
func DBNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var ms int64
	if err := db.QueryRowContext(ctx, sqlClockMs).Scan(&ms); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return time.UnixMilli(ms), nil
}

// DBClock returns the database's clock in epoch seconds: the clock of update_time.
func DBClock(ctx context.Context, db *sql.DB) (int64, error) {
	var now int64
	if err := db.QueryRowContext(ctx, sqlClock).Scan(&now); err != nil {
		return 0, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// LockHolder is the relay named by the value of a table's lock: relays write
// "host=<hostname> pid=<pid> since=<epoch ms> token=<random>" (package relay).
type LockHolder struct {
	Host  string
	PID   int
	Since time.Time
}

// ReadLockHolder returns the holder named by the lock at key; ok is false when the lock is
// free or its value names no holder (an older relay's bare random token). The token, which
// lets its holder extend or release the lock, is never returned.
func ReadLockHolder(ctx context.Context, rdb redis.Cmdable, key string) (h LockHolder, ok bool, err error) {
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("read lock %s: %w", key, err)
	}
	for _, f := range strings.Fields(v) {
		k, val, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			h.Host = val
		case "pid":
			h.PID, _ = strconv.Atoi(val)
		case "since":
			if ms, err := strconv.ParseInt(val, 10, 64); err == nil && ms > 0 {
				h.Since = time.UnixMilli(ms).UTC()
			}
		}
	}
	return h, h.Host != "" && h.PID > 0, nil
}
