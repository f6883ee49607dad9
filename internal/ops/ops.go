// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// query fills the {T} placeholder with table, validated and quoted.
func query(stmt, table string) (string, error) {
	if err := schema.ValidateIdent(table); err != nil {
		return "", err
	}
	return strings.ReplaceAll(stmt, "{T}", schema.QuoteIdent(table)), nil
}

// scanQuery is query for a statement that reads the (status, next_retry_time) index: {I}
// becomes a FORCE INDEX clause naming it, or nothing when the table has none. Forced, the
// statement ranges over the index whatever the table's statistics say (with most of a
// table sent, the optimizer may otherwise scan the whole table for the sent rows' range).
func scanQuery(ctx context.Context, db *sql.DB, stmt, table string) (string, error) {
	q, err := query(stmt, table)
	if err != nil {
		return "", err
	}
	name, err := schema.ScanIndex(ctx, db, table)
	if err != nil {
		return "", err
	}
	hint := ""
	if name != "" {
		hint = " FORCE INDEX (`" + strings.ReplaceAll(name, "`", "``") + "`)"
	}
	return strings.ReplaceAll(q, "{I}", hint), nil
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// TopicCount is the number of rows of one status and topic.
type TopicCount struct {
	Status  string `json:"status"`
	Topic   string `json:"topic"`
	Deleted bool   `json:"deleted,omitempty"` // rows with is_deleted = 1: never sent
	Count   int64  `json:"count"`
}

// StatusValue is the number of rows holding one status value outside the contract's.
type StatusValue struct {
	Value string `json:"value"`
	Count int64  `json:"count"`
}

// StatusReport summarizes an outbox table.
type StatusReport struct {
	Table string `json:"table"`
	// Pending, Failed, Sent and Dead count the rows of each status; rows marked is_deleted = 1
	// are never sent, so Pending, Failed and Dead leave them out (Sent counts them all).
	Pending int64 `json:"pending"`
	Failed  int64 `json:"failed"`
	Sent    int64 `json:"sent"`
	Dead    int64 `json:"dead"`
	// Handed counts the rows of status 4, written by transactional SDK writers and delivered
	// by the broker (docs/transactional.md); the relay sends one only if its half is discarded.
	Handed int64 `json:"handed"`
	// Deleted counts the unsent rows (pending, failed or dead) marked is_deleted = 1.
	Deleted int64 `json:"deleted"`
	// Unknown counts the rows whose status is NULL or outside 0-4: the relay never sends,
	// purges or changes them (docs/decisions.md, "NULLs in an adopted table"); UnknownByValue
	// breaks them down by the value found ("NULL", "7").
	Unknown        int64         `json:"unknown"`
	UnknownByValue []StatusValue `json:"unknown_by_value,omitempty"`
	// Due counts the rows the relay should be sending now (pending or failed, next_retry_time
	// passed, not deleted).
	Due int64 `json:"due"`
	// OldestDueAge is how long the oldest due row has been due; 0 when none is.
	OldestDueAge time.Duration `json:"-"`
	// OldestDueAgeSeconds is OldestDueAge in seconds, for JSON.
	OldestDueAgeSeconds float64 `json:"oldest_due_age_seconds"`
	// ByTopic breaks the unsent rows (pending, failed, dead) down by status and topic. Sent
	// rows are only counted in total, so that the report costs the backlog, not the history.
	ByTopic []TopicCount `json:"by_topic"`
	// Database is the server and schema the table lives in (config.DatabaseLabel), filled
	// in by the caller; empty when unknown.
	Database string `json:"database,omitempty"`
	// DatabaseName is the database's configured name (databases[].name), filled in by the
	// caller; empty in the single-database form.
	DatabaseName string `json:"database_name,omitempty"`
	// Lock is the state of the table's leader lock (see ReadLock), filled in by the caller;
	// nil when not read.
	Lock *LockState `json:"lock,omitempty"`
	// Partitions, with relay.partitions > 1, are the locks of the table's partitions, in
	// partition order; Lock is then the unpartitioned key, which no relay holds.
	Partitions []LockState `json:"partitions,omitempty"`
}

// Status counts the rows of table by status, and the unsent ones by topic, and measures the
// backlog: how many rows are due at now and for how long the oldest has been. now is the
// database's clock (DBNow): a host's clock ahead of it would age every row.
func Status(ctx context.Context, db *sql.DB, table string, now time.Time) (StatusReport, error) {
	r := StatusReport{Table: table, ByTopic: []TopicCount{}}
	if err := r.countByStatus(ctx, db); err != nil {
		return r, err
	}
	if err := r.countUnsentByTopic(ctx, db); err != nil {
		return r, err
	}
	q, _ := query(sqlDue, table)
	if err := db.QueryRowContext(ctx, q, now.UnixMilli()).Scan(&r.Due); err != nil {
		return r, fmt.Errorf("count due rows of %s: %w", table, err)
	}
	var err error
	if r.OldestDueAge, err = OldestDue(ctx, db, table, now); err != nil {
		return r, err
	}
	r.OldestDueAgeSeconds = r.OldestDueAge.Seconds()
	return r, nil
}

// countByStatus fills in the count of each known status of r.Table, and counts a status
// value the relay does not know under Unknown, by value.
func (r *StatusReport) countByStatus(ctx context.Context, db *sql.DB) error {
	q, err := query(sqlCountByStatus, r.Table)
	if err != nil {
		return err
	}
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("count %s by status: %w", r.Table, err)
	}
	for rows.Next() {
		var v sql.NullInt64
		var n int64
		if err := rows.Scan(&v, &n); err != nil {
			rows.Close()
			return fmt.Errorf("count %s by status: %w", r.Table, err)
		}
		st := outbox.Status(v.Int64)
		if !v.Valid || v.Int64 < 0 || v.Int64 > int64(outbox.StatusHanded) {
			r.Unknown += n
			r.UnknownByValue = append(r.UnknownByValue, StatusValue{Value: statusValue(v), Count: n})
			continue
		}
		switch st {
		case outbox.StatusPending:
			r.Pending = n
		case outbox.StatusFailed:
			r.Failed = n
		case outbox.StatusSent:
			r.Sent = n
		case outbox.StatusDead:
			r.Dead = n
		case outbox.StatusHanded:
			r.Handed = n
		}
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("count %s by status: %w", r.Table, err)
	}
	return nil
}

// countUnsentByTopic fills in ByTopic, and takes the rows of deleted topics out of the
// unsent counts into Deleted.
func (r *StatusReport) countUnsentByTopic(ctx context.Context, db *sql.DB) error {
	q, _ := query(sqlCountUnsentByTopic, r.Table)
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("count %s by topic: %w", r.Table, err)
	}
	for rows.Next() {
		var st int
		var live bool
		var tc TopicCount
		if err := rows.Scan(&st, &tc.Topic, &live, &tc.Count); err != nil {
			rows.Close()
			return fmt.Errorf("count %s by topic: %w", r.Table, err)
		}
		tc.Status, tc.Deleted = outbox.Status(st).String(), !live
		r.ByTopic = append(r.ByTopic, tc)
		if tc.Deleted {
			// The count by status comes from the index alone; this query reads the unsent
			// rows anyway, so it is where the deleted ones are taken out of the backlog.
			r.Deleted += tc.Count
			switch outbox.Status(st) {
			case outbox.StatusPending:
				r.Pending -= tc.Count
			case outbox.StatusFailed:
				r.Failed -= tc.Count
			case outbox.StatusDead:
				r.Dead -= tc.Count
			}
		}
	}
	if err := closeRows(rows); err != nil {
		return fmt.Errorf("count %s by topic: %w", r.Table, err)
	}
	return nil
}

// OldestDue returns how long the oldest due row of table has been due (since the later of its
// creation and its next_retry_time), or 0 when nothing is due. The `status` command and the
// relay's outbox_relay_oldest_due_age_seconds gauge both report it.
//
// It costs six index seeks, whatever the backlog: for each unsent status, the head of the
// rows of NULL next_retry_time (an adopted table's), the head of the rows due since
// creation (next_retry_time 0, oldest id first) and the head of the rows due since a retry or a delayed start (smallest next_retry_time). It is exact as long as ids
// grow with creation time, as AUTO_INCREMENT ids do.
func OldestDue(ctx context.Context, db *sql.DB, table string, now time.Time) (time.Duration, error) {
	q, err := query(sqlDueHead, table)
	if err != nil {
		return 0, err
	}
	qNull, _ := query(sqlDueHeadNull, table)
	nowMs := now.UnixMilli()
	oldest := nowMs
	seek := func(q string, args ...any) error {
		var since sql.NullInt64
		err := db.QueryRowContext(ctx, q, args...).Scan(&since)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("age of the oldest due row of %s: %w", table, err)
		case since.Valid && since.Int64 < oldest:
			oldest = since.Int64
		}
		return nil
	}
	for _, status := range []outbox.Status{outbox.StatusPending, outbox.StatusFailed} {
		// Rows written with next_retry_time 0 (most), and the rest up to now: two seeks.
		// Negative times are due too, as the relay reads them; an adopted table's NULL
		// next_retry_time is due since creation: a third seek.
		if err := seek(qNull, int(status)); err != nil {
			return 0, err
		}
		for _, r := range [][2]int64{{math.MinInt64, 0}, {1, nowMs}} {
			if err := seek(q, int(status), r[0], r[1]); err != nil {
				return 0, err
			}
		}
	}
	return time.Duration(nowMs-oldest) * time.Millisecond, nil
}

// statusValue is a status as found in the table: its number, or NULL.
func statusValue(v sql.NullInt64) string {
	if !v.Valid {
		return "NULL"
	}
	return strconv.FormatInt(v.Int64, 10)
}

// CountUnknown returns the rows of table whose status is NULL or outside 0-4 (see
// StatusReport.Unknown): three ranges of the status index, read from the index alone.
func CountUnknown(ctx context.Context, db *sql.DB, table string) (int64, error) {
	q, err := query(sqlCountUnknown, table)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("count rows of unknown status in %s: %w", table, err)
	}
	return n, nil
}

func closeRows(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// Filter selects dead rows. Its conditions are ANDed; an empty Filter selects every dead row
// (DeadList accepts that, Requeue only with All set).
type Filter struct {
	// MsgIDs selects these msg_ids only.
	MsgIDs []string
	// Topic and Tag match exactly, or as a pattern when they contain "*" (any characters).
	Topic, Tag string
	// OlderThan selects rows that have been dead (untouched) for at least this long,
	// by update_time and the database clock.
	OlderThan time.Duration
	// All confirms that an empty filter means every dead row, for Requeue.
	All bool
}

func (f Filter) empty() bool {
	return len(f.MsgIDs) == 0 && f.Topic == "" && f.Tag == "" && f.OlderThan <= 0
}

// where returns the filter's extra conditions (each starting with " AND") and their arguments.
func (f Filter) where() (string, []any) {
	var sb strings.Builder
	var args []any
	if len(f.MsgIDs) > 0 {
		sb.WriteString(" AND msg_id IN (" + placeholders(len(f.MsgIDs)) + ")")
		for _, id := range f.MsgIDs {
			args = append(args, id)
		}
	}
	for _, c := range []struct{ col, val string }{{"topic", f.Topic}, {"tag", f.Tag}} {
		switch {
		case c.val == "":
		case strings.Contains(c.val, "*"):
			sb.WriteString(" AND " + c.col + " LIKE ? ESCAPE '!'")
			args = append(args, globToLike(c.val))
		default:
			sb.WriteString(" AND " + c.col + " = ?")
			args = append(args, c.val)
		}
	}
	if f.OlderThan > 0 {
		sb.WriteString(" AND update_time < NOW() - INTERVAL ? SECOND")
		args = append(args, int64(f.OlderThan.Seconds()))
	}
	return sb.String(), args
}

// globToLike turns a "*" pattern into a LIKE pattern, escaping LIKE's own wildcards.
func globToLike(glob string) string {
	r := strings.NewReplacer("!", "!!", "%", "!%", "_", "!_", "*", "%")
	return r.Replace(glob)
}

// DeadMessage is a dead row as listed by DeadList.
type DeadMessage struct {
	ID            int64     `json:"id"`
	MsgID         string    `json:"msg_id"`
	Topic         string    `json:"topic"`
	Tag           string    `json:"tag"`
	FailReason    string    `json:"fail_reason"`
	RetryCount    int       `json:"retry_count"`
	MaxRetryCount int       `json:"max_retry_count"`
	CreateTime    time.Time `json:"create_time"`
	// UpdateTime is when the row was last changed, normally when it died.
	UpdateTime   time.Time `json:"update_time"`
	MsgKeys      string    `json:"msg_keys"`
	ShardingKey  string    `json:"sharding_key"`
	ContentChars int64     `json:"content_chars"`
}

// DefaultListLimit is DeadList's limit when none is given.
const DefaultListLimit = 100

// DeadList returns up to limit dead rows matching f, oldest id first, starting after id
// afterID (0 for the start; pass the last ID to page). limit <= 0 means DefaultListLimit.
// Content is not returned, only its length.
func DeadList(ctx context.Context, db *sql.DB, table string, f Filter, afterID int64, limit int) ([]DeadMessage, error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	q, err := query(sqlDeadSelect, table)
	if err != nil {
		return nil, err
	}
	w, args := f.where()
	q = strings.Replace(q, "{W}", w, 1)
	rows, err := db.QueryContext(ctx, q, append(args, afterID, limit)...)
	if err != nil {
		return nil, fmt.Errorf("list dead rows of %s: %w", table, err)
	}
	out := []DeadMessage{}
	for rows.Next() {
		var m DeadMessage
		var created, updated int64
		if err := rows.Scan(&m.ID, &m.MsgID, &m.Topic, &m.Tag, &m.FailReason, &m.RetryCount, &m.MaxRetryCount,
			&created, &updated, &m.MsgKeys, &m.ShardingKey, &m.ContentChars); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list dead rows of %s: %w", table, err)
		}
		m.CreateTime, m.UpdateTime = time.Unix(created, 0).UTC(), time.Unix(updated, 0).UTC()
		out = append(out, m)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("list dead rows of %s: %w", table, err)
	}
	return out, nil
}

// CountDead returns how many dead rows match f.
func CountDead(ctx context.Context, db *sql.DB, table string, f Filter) (int64, error) {
	q, err := query(sqlCountDead, table)
	if err != nil {
		return 0, err
	}
	w, args := f.where()
	var n int64
	if err := db.QueryRowContext(ctx, strings.Replace(q, "{W}", w, 1), args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count dead rows of %s: %w", table, err)
	}
	return n, nil
}

// ErrNoSelection is returned by Requeue for an empty Filter without All.
var ErrNoSelection = errors.New("requeue needs a selection: msg ids, a topic, a tag, an age, or all dead rows")

// RequeueResult reports what Requeue changed.
type RequeueResult struct {
	// DatabaseName is the configured name of the table's database, filled in by the caller;
	// empty in the single-database form.
	DatabaseName string `json:"database_name,omitempty"`
	Table        string `json:"table"`
	// Requeued lists the msg_ids set back to pending, in id order.
	Requeued []string `json:"requeued"`
	// Skipped explains each asked-for msg_id that was left alone (not found, not dead, or
	// deleted), as msg_id -> reason.
	Skipped map[string]string `json:"skipped,omitempty"`
}

// SkipNotFound is RequeueResult.Skipped's reason for a msg_id the table does not hold.
const SkipNotFound = "not found"

// requeueChunk bounds the rows locked and updated per transaction.
const requeueChunk = 1000

// Requeue sets the dead rows matching f back to pending with a fresh retry budget
// (status 0, retry_count 0, next_retry_time 0, fail_reason NULL), chunk by chunk in short
// READ COMMITTED transactions. Only rows that are dead when updated change. An empty filter
// requires f.All.
func Requeue(ctx context.Context, db *sql.DB, table string, f Filter) (RequeueResult, error) {
	res := RequeueResult{Table: table, Requeued: []string{}}
	if f.empty() && !f.All {
		return res, ErrNoSelection
	}
	sel, err := query(sqlRequeueSelect, table)
	if err != nil {
		return res, err
	}
	w, args := f.where()
	sel = strings.Replace(sel, "{W}", w, 1)
	upd, _ := query(sqlRequeue, table)
	var after int64
	for {
		ids, msgIDs, err := requeueChunkTx(ctx, db, sel, upd, args, after)
		if err != nil {
			return res, fmt.Errorf("requeue dead rows of %s: %w", table, err)
		}
		res.Requeued = append(res.Requeued, msgIDs...)
		if len(ids) < requeueChunk {
			break
		}
		after = ids[len(ids)-1]
	}
	if len(f.MsgIDs) > 0 {
		if res.Skipped, err = explainSkipped(ctx, db, table, f.MsgIDs, res.Requeued); err != nil {
			return res, err
		}
	}
	return res, nil
}

func requeueChunkTx(ctx context.Context, db *sql.DB, sel, upd string, args []any, after int64) (ids []int64, msgIDs []string, err error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	rows, err := tx.QueryContext(ctx, sel, append(append([]any{}, args...), after, requeueChunk)...)
	if err != nil {
		return nil, nil, err
	}
	for rows.Next() {
		var id int64
		var msgID string
		if err = rows.Scan(&id, &msgID); err != nil {
			rows.Close()
			return nil, nil, err
		}
		ids, msgIDs = append(ids, id), append(msgIDs, msgID)
	}
	if err = closeRows(rows); err != nil {
		return nil, nil, err
	}
	if len(ids) == 0 {
		return nil, nil, tx.Commit()
	}
	idArgs := make([]any, len(ids))
	for i, id := range ids {
		idArgs[i] = id
	}
	r, err := tx.ExecContext(ctx, strings.Replace(upd, "{IDS}", placeholders(len(ids)), 1), idArgs...)
	if err != nil {
		return nil, nil, err
	}
	// Only another requeue changes dead rows; if one ran at the same time, say so rather
	// than report rows this one did not requeue.
	if n, _ := r.RowsAffected(); n != int64(len(ids)) {
		err = fmt.Errorf("requeued %d of %d dead rows: another requeue changed the rest meanwhile; run it again", n, len(ids))
		return nil, nil, err
	}
	return ids, msgIDs, tx.Commit()
}

func explainSkipped(ctx context.Context, db *sql.DB, table string, asked, done []string) (map[string]string, error) {
	requeued := map[string]bool{}
	for _, id := range done {
		requeued[id] = true
	}
	var rest []any
	skipped := map[string]string{}
	for _, id := range asked {
		if !requeued[id] {
			rest = append(rest, id)
			skipped[id] = SkipNotFound
		}
	}
	if len(rest) == 0 {
		return nil, nil
	}
	q, _ := query(sqlStatusOfMsgIDs, table)
	rows, err := db.QueryContext(ctx, strings.Replace(q, "{IDS}", placeholders(len(rest)), 1), rest...)
	if err != nil {
		return nil, fmt.Errorf("look up msg ids in %s: %w", table, err)
	}
	for rows.Next() {
		var id string
		var st sql.NullInt64
		var del bool
		if err := rows.Scan(&id, &st, &del); err != nil {
			rows.Close()
			return nil, err
		}
		switch {
		case del:
			skipped[id] = "deleted (is_deleted = 1)"
		case !st.Valid:
			skipped[id] = "not dead: status NULL (unknown)"
		case outbox.Status(st.Int64) != outbox.StatusDead:
			skipped[id] = "not dead: " + outbox.Status(st.Int64).String()
		default:
			skipped[id] = "did not match the other filters"
		}
	}
	return skipped, closeRows(rows)
}

// MinPurgeRetention is the shortest retention purge accepts without an explicit override: a
// purged row's msg_id no longer meets the unique key, so the same msg_id can be inserted and
// published again, and consumers deduplicate it only while they remember its key.
const MinPurgeRetention = time.Hour

// PurgeOptions tunes Purge.
type PurgeOptions struct {
	// OlderThan is the retention: sent rows whose update_time and sent_time are older are
	// deleted. Required (> 0).
	OlderThan time.Duration
	// BatchSize is the rows deleted per statement. Defaults to 1000.
	BatchSize int
	// DryRun counts what would be deleted and deletes nothing.
	DryRun bool
	// Pause is slept between batches (to spare replicas); stops early with ctx. Defaults to 0.
	Pause time.Duration
}

// PurgeResult reports a purge.
type PurgeResult struct {
	// DatabaseName is the configured name of the table's database, filled in by the caller;
	// empty in the single-database form.
	DatabaseName string `json:"database_name,omitempty"`
	Table        string `json:"table"`
	// Deleted is the rows deleted, or that would be with DryRun.
	Deleted int64 `json:"deleted"`
	Batches int   `json:"batches"`
	DryRun  bool  `json:"dry_run"`
	// Cutoff is the horizon: rows last updated before it were eligible (database clock).
	Cutoff string `json:"cutoff"`
	// JournalDeleted is the entries of the table's stored-position journal settled before
	// the horizon that were deleted, or would be with DryRun; 0 without a journal.
	JournalDeleted int64 `json:"journal_deleted"`
}

// Purge deletes sent and handed rows older than opts.OlderThan in batches of opts.BatchSize,
// each its own short statement, until none is left or ctx ends. Pending, failed and dead rows are never
// touched, and the horizon is fixed at the start, so Purge ends even while the relay keeps
// sending. It is safe to run alongside a relay. Then it deletes the entries of the table's
// stored-position journal settled before the same horizon, in batches of the same size.
func Purge(ctx context.Context, db *sql.DB, table string, opts PurgeOptions) (PurgeResult, error) {
	res := PurgeResult{Table: table, DryRun: opts.DryRun}
	if opts.OlderThan <= 0 {
		return res, fmt.Errorf("purge %s: the retention must be positive, got %s", table, opts.OlderThan)
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 1000
	}
	cutoffQ, err := query(sqlCutoff, table)
	if err != nil {
		return res, err
	}
	if err := db.QueryRowContext(ctx, cutoffQ, int64(opts.OlderThan.Seconds())).Scan(&res.Cutoff); err != nil {
		return res, fmt.Errorf("purge %s: read database clock: %w", table, err)
	}
	// sent_time is written on the database's clock, in epoch ms.
	dbNow, err := DBNow(ctx, db)
	if err != nil {
		return res, fmt.Errorf("purge %s: %w", table, err)
	}
	sentCutoff := dbNow.Add(-opts.OlderThan).UnixMilli()
	if opts.DryRun {
		q, _ := query(sqlPurgeCount, table)
		for _, st := range purgedStatuses {
			var n int64
			if err := db.QueryRowContext(ctx, q, st, sentCutoff, res.Cutoff, sentCutoff).Scan(&n); err != nil {
				return res, fmt.Errorf("purge %s (dry run): %w", table, err)
			}
			res.Deleted += n
		}
		res.JournalDeleted, err = purgeJournal(ctx, db, table, sentCutoff, opts)
		return res, err
	}
	sel, err := scanQuery(ctx, db, sqlPurgeSelect, table)
	if err != nil {
		return res, fmt.Errorf("purge %s: %w", table, err)
	}
	del, _ := query(sqlPurgeDelete, table)
	c := purgeCursor{next: math.MinInt64, id: math.MinInt64}
	for i := 0; i < len(purgedStatuses); {
		n, selected, err := purgeBatch(ctx, db, sel, del, purgedStatuses[i], res.Cutoff, sentCutoff, opts.BatchSize, &c)
		if err != nil {
			return res, fmt.Errorf("purge %s: %w", table, err)
		}
		res.Deleted += n
		if i == 0 || selected > 0 { // the handed rows' walk counts only when it finds some
			res.Batches++
		}
		if selected < opts.BatchSize {
			i++
			c = purgeCursor{next: math.MinInt64, id: math.MinInt64}
			continue
		}
		if opts.Pause > 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(opts.Pause):
			}
		}
	}
	res.JournalDeleted, err = purgeJournal(ctx, db, table, sentCutoff, opts)
	return res, err
}

// purgeJournal deletes the entries of table's stored-position journal settled before
// beforeMs (the sent rows' horizon, epoch ms of the database clock), opts.BatchSize at a
// time, oldest first, so that the journal never outgrows the table; with opts.DryRun it
// counts them. A table without a journal has nothing to purge.
func purgeJournal(ctx context.Context, db *sql.DB, table string, beforeMs int64, opts PurgeOptions) (int64, error) {
	if ok, err := schema.HasStoredLog(ctx, db, table); err != nil || !ok {
		return 0, err
	}
	j, err := storedlog.Open(db, table)
	if err != nil {
		return 0, err
	}
	if opts.DryRun {
		var n int64
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+schema.QuoteIdent(j.Name())+" WHERE settled_time < ?", beforeMs).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("purge %s (dry run): count %s: %w", table, j.Name(), err)
		}
		return n, nil
	}
	var total int64
	for {
		n, err := j.Purge(ctx, beforeMs, opts.BatchSize)
		total += n
		if err != nil || n < int64(opts.BatchSize) {
			return total, err
		}
		if opts.Pause > 0 {
			select {
			case <-ctx.Done():
				return total, ctx.Err()
			case <-time.After(opts.Pause):
			}
		}
	}
}

// purgedStatuses are the statuses Purge deletes, in order: sent rows, then handed rows
// (delivered by the broker; docs/transactional.md).
var purgedStatuses = []int{int(outbox.StatusSent), int(outbox.StatusHanded)}

// purgeCursor is a purge's position in one status's range of the (status, next_retry_time)
// index: the next batch starts after (next, id).
type purgeCursor struct{ next, id int64 }

// purgeRetries bounds the attempts of one purge batch that keeps losing lock conflicts.
const purgeRetries = 5

// purgeBatch deletes one batch in a READ COMMITTED transaction of its own. Under the server's
// default REPEATABLE READ the DELETE would hold gap locks on the (status, next_retry_time) range,
// which the relay's write-back, moving rows into status 2, runs into: a deadlock. Without gap
// locks it touches only the old sent rows it deletes; a conflict that still happens (InnoDB
// breaks deadlocks by rolling one side back) is retried, as InnoDB asks.
// purgeBatch returns the rows it deleted and the rows it selected; a row the relay or another
// purge changed between the two is left alone, and a short selection ends the purge.
func purgeBatch(ctx context.Context, db *sql.DB, sel, del string, status int, cutoff string, sentCutoff int64, batch int, c *purgeCursor) (deleted int64, selected int, err error) {
	var last purgeCursor // where this batch's selection ended; the cursor moves there once it is done
	for attempt := 1; ; attempt++ {
		n, err := func() (int64, error) {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
			if err != nil {
				return 0, err
			}
			defer tx.Rollback()
			rows, err := tx.QueryContext(ctx, sel, status, sentCutoff, c.next, c.id, c.next, cutoff, sentCutoff, batch)
			if err != nil {
				return 0, err
			}
			var ids []any
			last = *c
			for rows.Next() {
				if err := rows.Scan(&last.id, &last.next); err != nil {
					rows.Close()
					return 0, err
				}
				ids = append(ids, last.id)
			}
			if err := closeRows(rows); err != nil {
				return 0, err
			}
			selected = len(ids)
			if len(ids) == 0 {
				return 0, tx.Commit()
			}
			args := append(ids, status, cutoff, sentCutoff)
			r, err := tx.ExecContext(ctx, strings.ReplaceAll(del, "{IDS}", placeholders(len(ids))), args...)
			if err != nil {
				return 0, err
			}
			n, err := r.RowsAffected()
			if err != nil {
				return 0, err
			}
			return n, tx.Commit()
		}()
		if err == nil {
			*c = last
		}
		if err == nil || !mysqlerr.Retryable(err) || attempt == purgeRetries {
			return n, selected, err
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
		}
	}
}

// PurgeLoop runs Purge on every table now and then every interval until ctx ends, logging
// each result; errors are logged and retried at the next tick. It returns ctx.Err().
// The relay runs it when relay.purge_retention is set.
func PurgeLoop(ctx context.Context, db *sql.DB, tables []string, opts PurgeOptions, interval time.Duration, log zerolog.Logger) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, table := range tables {
			res, err := Purge(ctx, db, table, opts)
			switch {
			case ctx.Err() != nil:
				return ctx.Err()
			case err != nil:
				log.Error().Err(err).Str("table", table).Msg("purge failed")
			case res.Deleted > 0 || res.JournalDeleted > 0:
				log.Info().Str("table", table).Int64("deleted", res.Deleted).Int("batches", res.Batches).Int64("journal_deleted", res.JournalDeleted).
					Str("cutoff", res.Cutoff).Msg("purged sent rows")
			default:
				log.Debug().Str("table", table).Str("cutoff", res.Cutoff).Msg("nothing to purge")
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
