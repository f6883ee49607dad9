// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/schema"
)

// store holds every statement the relay runs against one table. The table name was
// validated when the relay was built; values always go through placeholders.
type store struct {
	db *sql.DB
	// pg tracks the statements' answers, for the stall clock; nil tracks nothing.
	pg *progress
	// table is the quoted table name for SQL; name is the plain one for messages.
	table, name string
	// timeout bounds each statement.
	timeout time.Duration
	// partition, when partitions > 1, restricts the scan and the idle probe to the rows of
	// one partition (schema.PartitionColumn = partition).
	partition, partitions int

	// scanMu guards scanHint, the page query's FORCE INDEX clause, found once (scanIndex).
	scanMu   sync.Mutex
	scanHint string
	// checkHint is the ordered check's FORCE INDEX clause for the table's (sharding_key, id)
	// index, empty when the table has none; checkStatusHint then that of its
	// (sharding_key, status, id) index (an older table's), which the check reads once per
	// status (orderedIndex); checkLooked is when they were looked up.
	checkHint       string
	checkStatusHint string
	checkLooked     time.Time
	scanDone        bool
	// reasonChars is the width of the table's fail_reason (0: unknown), read by scanIndex.
	reasonChars int
	// positions: the table has the audit columns, and sent rows record where the broker
	// stored them (markSentAt); read by scanIndex.
	positions bool
}

// row is one due outbox row as read by a page.
type row struct {
	id          int64
	msgID       string
	topic, tag  string
	content     []byte
	contentLen  int64 // content's length in bytes, known even when content is not loaded
	keys        string
	shardingKey string
	properties  sql.NullString
	retryCount  int
	maxRetries  int
	nextRetry   int64
	nextNull    bool // next_retry_time is NULL (read as 0: due now)
}

// cursor is the keyset position within one status: pages resume after (next, id), or, while
// null holds, after id among the rows whose next_retry_time is NULL (due now; they come
// first in the index).
type cursor struct {
	null bool
	next int64
	id   int64
}

// pageQuery returns the page statement and arguments (the benchmarks EXPLAIN it). Bodies
// longer than maxBody are not sent over the wire: their length is enough to mark them dead.
//
// The order is that of the (status, next_retry_time) index, whose entries carry the primary
// key, so MySQL reads the due rows only: it neither walks the primary key over the sent
// history nor sorts (a global ORDER BY id goes quadratic with the sent history: 15 ms per
// batch at the start, 723 ms after 550k rows sent; docs/performance.md has the EXPLAIN).
// The keyset condition is written as two ranges, (status, next, id > c.id) and
// (status, next > c.next), so that MySQL and MariaDB bound the index range by id as well
// (secondary index entries end with the primary key: "extended keys"). The equivalent
// "next >= c.next AND (next > c.next OR id > c.id)" bounds it by next only and re-examines
// every row held back earlier in the pass on each page: 99,504 index entries read for a
// page of 500 behind 99,000 held rows, against 500 for this form (Handler_icp_attempts).
//
// An adopted table's NULL next_retry_time is due now (schema.NextRetrySQL): NULLs come
// first in the index, so the pages of a status start with the range (status, NULL, id >
// c.id) next to the range of every due value, and drop it once past the NULLs.
//
// A partition's relay adds "relay_partition = ? AND" in front: its index is
// (relay_partition, status, next_retry_time), the same range one level down.
func (s *store) pageQuery(status int, nowMs int64, c cursor, limit, maxBody int) (string, []any) {
	where, args := s.partitionWhere([]any{maxBody})
	due := `next_retry_time <= ? AND ((next_retry_time = ? AND id > ?) OR next_retry_time > ?)`
	args = append(args, status)
	if c.null {
		due = `((next_retry_time IS NULL AND id > ?) OR next_retry_time <= ?)`
		args = append(args, c.id, nowMs)
	} else {
		args = append(args, nowMs, c.next, c.id, c.next)
	}
	// NULLs of an adopted table's nullable columns read as the contract's defaults, so that
	// no row fails its page; a NULL msg_id or topic then makes the row dead with a reason.
	return `SELECT id, COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, ''), IF(LENGTH(content) <= ?, content, NULL), COALESCE(LENGTH(content), 0),
			COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), properties, ` + schema.RetryCountSQL + `, ` + schema.MaxRetrySQL + `,
			next_retry_time IS NULL, ` + schema.NextRetrySQL + `
		FROM ` + s.table + s.scanHint + `
		WHERE ` + where + `status = ? AND ` + due + ` AND ` + schema.NotDeletedSQL + `
		ORDER BY next_retry_time, id LIMIT ?`, append(args, limit)
}

// partitionWhere returns the partition condition ("" for an unpartitioned table) and args
// followed by its argument.
func (s *store) partitionWhere(args []any) (string, []any) {
	if s.partitions <= 1 {
		return "", args
	}
	return schema.QuoteIdent(schema.PartitionColumn) + " = ? AND ", append(args, s.partition)
}

// anyDue reports whether a row may be due by the database's clock: one statement of two
// index range seeks that the idle relay runs instead of a pass (soft-deleted rows may make it
// say yes; the pass then finds nothing, as it would have anyway).
func (s *store) anyDue(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var n int
	// Two ranges of the (status, next_retry_time) index, or of the partition's index one
	// level down (key_len 12: every part used).
	where, args := s.partitionWhere(nil)
	err := s.queryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM `+s.table+`
		WHERE `+where+`status IN (0, 1) AND (next_retry_time <= `+dbNowSQL+` OR next_retry_time IS NULL) LIMIT 1) due`, args...).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("probe due rows of %s: %w", s.name, err)
	}
	return n > 0, nil
}

// scanIndex finds the table's (status, next_retry_time) index once and makes the page query
// force it. Unforced, MariaDB 10.11 plans the keyset query as a ref on status alone as soon
// as the table's statistics are current (InnoDB refreshes them once a tenth of the table
// changed): every page then walks the status's entries from the first, rows already read
// and the delete-marked entries of rows written back but not yet purged included, so pages
// cost more and more as a large backlog drains. Forced, it is the bounded range the keyset
// is written for (key_len 17). The index is found by its columns, as schema.Check checks
// it, since an adopted table may name it otherwise; without one the query goes unforced.
func (s *store) scanIndex(ctx context.Context) error {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	if s.scanDone {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cols := "status,next_retry_time"
	if s.partitions > 1 {
		cols = schema.PartitionColumn + "," + cols
	}
	var err error
	if s.scanHint, err = s.indexHint(ctx, cols); err != nil {
		return err
	}
	if err = s.lookCheckIndex(ctx); err != nil {
		return err
	}
	if s.reasonChars, err = schema.FailReasonWidth(ctx, s.db, s.name); err != nil {
		return err
	}
	if s.positions, err = schema.HasAuditColumns(ctx, s.db, s.name); err != nil {
		return err
	}
	s.scanDone = true
	return nil
}

// indexHint returns a FORCE INDEX clause for the table's index of exactly cols (lower-case,
// comma-separated), or "" when it has none.
func (s *store) indexHint(ctx context.Context, cols string) (string, error) {
	var name string
	err := s.queryRow(ctx, schema.IndexByColumnsSQL, s.name, cols).Scan(&name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("find the (%s) index of %s: %w", cols, s.name, err)
	}
	return " FORCE INDEX (`" + strings.ReplaceAll(name, "`", "``") + "`)", nil
}

// orderKey identifies one ordered stream: a sharding key within a topic.
type orderKey struct{ topic, key string }

// park makes the pending rows ids, held behind the unsent row head of their key that is not
// due before untilMs, due at untilMs, their reason naming head (parkedReason): the scan stops
// reading them until their head may go. Only pending rows due earlier are moved; the status
// is not touched.
func (s *store) park(ctx context.Context, ids []int64, untilMs, head int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var total int64
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(start+maxIDsPerStatement, len(ids))]
		args := make([]any, 0, len(chunk)+3)
		args = append(args, untilMs, parkedReason(head))
		for _, id := range chunk {
			args = append(args, id)
		}
		args = append(args, untilMs)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET next_retry_time = ?, fail_reason = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status = 0 AND `+schema.NextRetrySQL+` < ? AND `+schema.NotDeletedSQL, args...)
		if err != nil {
			return total, fmt.Errorf("park held rows of %s: %w", s.name, err)
		}
		total += n
	}
	return total, nil
}

// unpark makes the pending rows of the ordered stream k after id, parked at untilMs behind
// it (park), due at nowMs: their head was sent or went dead before its time. Like every
// change, the rows are found by a read without locks and changed by primary key, guarded.
func (s *store) unpark(ctx context.Context, k orderKey, id, untilMs, nowMs int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	rows, err := s.query(ctx, `SELECT id FROM `+s.table+`
		WHERE sharding_key = ? AND topic = ? AND status = 0 AND id > ? AND next_retry_time = ? AND `+schema.NotDeletedSQL,
		k.key, k.topic, id, untilMs)
	if err != nil {
		return 0, fmt.Errorf("find parked rows of %s: %w", s.name, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("find parked rows of %s: %w", s.name, err)
		}
		ids = append(ids, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("find parked rows of %s: %w", s.name, err)
	}
	var total int64
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(start+maxIDsPerStatement, len(ids))]
		args := make([]any, 0, len(chunk)+2)
		args = append(args, nowMs)
		for _, id := range chunk {
			args = append(args, id)
		}
		args = append(args, untilMs)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET next_retry_time = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status = 0 AND next_retry_time = ? AND `+schema.NotDeletedSQL, args...)
		if err != nil {
			return total, fmt.Errorf("unpark rows of %s: %w", s.name, err)
		}
		total += n
	}
	return total, nil
}

// maxIDsPerStatement bounds an IN list.
const maxIDsPerStatement = 1000

// maxReasonChars is the width of the contract's fail_reason.
const maxReasonChars = 1000

// Every status change is one autocommitted statement that reaches its rows through the
// primary key (FORCE INDEX (PRIMARY)), so that it never waits for a writer's uncommitted rows
// nor takes gap locks that block writers' INSERTs, whatever the optimizer's statistics say:
// planned on the (status, ...) indexes under REPEATABLE READ, a guarded UPDATE waited
// 5-6.7 s behind writers holding transactions open (measured on MariaDB 10.11). Autocommit, not a transaction
// of our own: a relay frozen (SIGSTOP, a VM pause) between an UPDATE and its COMMIT would
// hold the rows' locks and stop the leader that replaced it. The binary's connections also
// run in READ COMMITTED. The status guard keeps a newer state written by another relay or an
// operator.

// exec runs one status change and returns the rows it changed.
func (s *store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := s.execStmt(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// markSent sets the acknowledged rows, which had retryCount failures when they were read,
// sent, at nowMs: sent_time and next_retry_time both (a settled row's next_retry_time is
// when it was settled, so that the purge and the dashboard find old and recent sent rows on
// the (status, next_retry_time) index the row moves in anyway; see schema.obsoleteIndexes). Rows changed meanwhile (by another relay, or an operator) are left alone: the guard
// on retry_count keeps a newer failure or requeue. The number changed is returned.
func (s *store) markSent(ctx context.Context, retryCount int, ids []int64, nowMs int64) (int64, error) {
	var total int64
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(start+maxIDsPerStatement, len(ids))]
		args := append([]any{nowMs, nowMs}, int64Args(chunk)...)
		args = append(args, retryCount)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
		total += n
		if err != nil {
			return total, fmt.Errorf("mark %d rows of %s sent: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// maxStoredCount is the largest retry_count written: the contract's column is a signed INT,
// and a count written past it is refused (error 1264) under strict sql_mode, with the whole
// statement. A row at the limit (an adopted table's "retry for ever" max_retry_count) keeps
// it; whether it goes dead is still decided on the true count.
const maxStoredCount = math.MaxInt32

// maxStoredTime bounds a next_retry_time written (epoch ms, year 9999): a backoff beyond it
// is no schedule, and next_retry_time + anything must not overflow in SQL either.
const maxStoredTime = 253402300799999

// boundedCount is count as it may be written to retry_count.
func boundedCount(count int) int { return max(0, min(count, maxStoredCount)) }

// boundedTime is ms as it may be written to next_retry_time.
func boundedTime(ms int64) int64 { return min(ms, maxStoredTime) }

// failure is one failed row of a write-back.
type failure struct {
	id     int64
	reason string
}

// markRetry records a failed attempt of rows that had retryCount failures before: the count
// goes up by one, and the row goes dead when it exceeds max_retry_count, else waits until
// nextMs. The guard on retry_count makes a second relay's concurrent write a no-op.
func (s *store) markRetry(ctx context.Context, retryCount int, fails []failure, nextMs int64) (int64, error) {
	var total int64
	for start := 0; start < len(fails); start += maxIDsPerStatement {
		chunk := fails[start:min(start+maxIDsPerStatement, len(fails))]
		reasonSQL, reasonArgs := s.reasonCase(chunk)
		args := []any{boundedCount(retryCount + 1), retryCount + 1, retryCount + 1, boundedTime(nextMs)}
		args = append(args, reasonArgs...)
		args = append(args, failureIDs(chunk)...)
		args = append(args, retryCount)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET retry_count = ?,
			status = CASE WHEN ? > `+schema.MaxRetrySQL+` THEN 3 ELSE 1 END,
			next_retry_time = CASE WHEN ? > `+schema.MaxRetrySQL+` THEN `+settledNowSQL+` ELSE ? END, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
		total += n
		if err != nil {
			return total, fmt.Errorf("record %d failed attempts in %s: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// markTransientRetry records a transient failure that singled its rows out: the count goes
// up by one but never past max_retry_count, and the rows stay failed: a timeout or a
// dropped connection never makes a message dead.
func (s *store) markTransientRetry(ctx context.Context, retryCount int, fails []failure, nextMs int64) (int64, error) {
	var total int64
	for start := 0; start < len(fails); start += maxIDsPerStatement {
		chunk := fails[start:min(start+maxIDsPerStatement, len(fails))]
		reasonSQL, reasonArgs := s.reasonCase(chunk)
		args := []any{boundedCount(retryCount + 1), boundedTime(nextMs)}
		args = append(args, reasonArgs...)
		args = append(args, failureIDs(chunk)...)
		args = append(args, retryCount)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET retry_count = LEAST(?, `+schema.MaxRetrySQL+`),
			status = 1, next_retry_time = ?, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
		total += n
		if err != nil {
			return total, fmt.Errorf("record %d failed attempts in %s: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// markDeferred records an attempt that failed in a broker incident: the rows, which had
// retryCount failures, wait until nextMs with their retry counts untouched, and say why in
// fail_reason. The guard on retry_count keeps a newer failure another relay recorded.
func (s *store) markDeferred(ctx context.Context, retryCount int, fails []failure, nextMs int64) (int64, error) {
	var total int64
	for start := 0; start < len(fails); start += maxIDsPerStatement {
		chunk := fails[start:min(start+maxIDsPerStatement, len(fails))]
		reasonSQL, reasonArgs := s.reasonCase(chunk)
		args := append([]any{boundedTime(nextMs)}, reasonArgs...)
		args = append(args, failureIDs(chunk)...)
		args = append(args, retryCount)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET status = 1, next_retry_time = ?, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
		total += n
		if err != nil {
			return total, fmt.Errorf("defer %d rows of %s: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// markSentPerRow is markSent with one autocommitted UPDATE per row, the way seed 002's relay
// wrote back. For the benchmark only (Config.perRowWriteBack): it is the baseline that
// the set-based markSent is measured against.
func (s *store) markSentPerRow(ctx context.Context, _ int, ids []int64, nowMs int64) (int64, error) {
	var total int64
	for _, id := range ids {
		res, err := s.execStmt(ctx, `UPDATE `+s.table+` SET status = 2, sent_time = ?
			WHERE id = ? AND status IN (0, 1)`, nowMs, id)
		if err != nil {
			return total, fmt.Errorf("mark row %d of %s sent: %w", id, s.name, err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// markRetryPerRow is markRetry with one autocommitted UPDATE per row. For the benchmark only
// (Config.perRowWriteBack).
func (s *store) markRetryPerRow(ctx context.Context, retryCount int, fails []failure, nextMs int64) (int64, error) {
	var total int64
	for _, f := range fails {
		res, err := s.execStmt(ctx, `UPDATE `+s.table+` SET retry_count = ?,
			status = CASE WHEN ? > `+schema.MaxRetrySQL+` THEN 3 ELSE 1 END, next_retry_time = ?, fail_reason = ?
			WHERE id = ? AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`,
			retryCount+1, retryCount+1, nextMs, s.truncateReason(f.reason), f.id, retryCount)
		if err != nil {
			return total, fmt.Errorf("record failed attempt of row %d in %s: %w", f.id, s.name, err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// settledNowSQL is the database's clock in epoch ms: the next_retry_time of a row going dead
// (a settled row's next_retry_time is when it was settled; see markSent).
const settledNowSQL = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

// markDead parks rows that can never be sent, with their reasons.
func (s *store) markDead(ctx context.Context, fails []failure) (int64, error) {
	var total int64
	for start := 0; start < len(fails); start += maxIDsPerStatement {
		chunk := fails[start:min(start+maxIDsPerStatement, len(fails))]
		reasonSQL, args := s.reasonCase(chunk)
		args = append(args, failureIDs(chunk)...)
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET status = 3, next_retry_time = `+settledNowSQL+`, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1)`, args...)
		total += n
		if err != nil {
			return total, fmt.Errorf("mark %d rows of %s dead: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// backlog returns the unsent rows (pending or failed; rows marked is_deleted = 1 are never
// sent and left out, at the cost of reading the backlog's rows, not only the index: 0.4 s
// instead of 0.2 s for 500k rows) and how long the oldest due row has been due
// (ops.OldestDue, as the status command reports it).
func (s *store) backlog(ctx context.Context, now time.Time) (pending int64, oldestDue time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err = s.queryRow(ctx, `SELECT COUNT(*) FROM `+s.table+` WHERE status IN (0, 1) AND `+schema.NotDeletedSQL).Scan(&pending)
	if err != nil {
		return 0, 0, fmt.Errorf("count backlog of %s: %w", s.name, err)
	}
	oldestDue, err = ops.OldestDue(ctx, s.db, s.name, now)
	return pending, oldestDue, err
}

// reasonCase returns the SQL expression and arguments that set each row's own reason: a
// single placeholder when all reasons agree, as they do when the broker is down.
func (s *store) reasonCase(fails []failure) (string, []any) {
	same := true
	for _, f := range fails[1:] {
		if f.reason != fails[0].reason {
			same = false
			break
		}
	}
	if same {
		return "?", []any{s.truncateReason(fails[0].reason)}
	}
	var b strings.Builder
	args := make([]any, 0, 2*len(fails))
	b.WriteString("CASE id")
	for _, f := range fails {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, f.id, s.truncateReason(f.reason))
	}
	b.WriteString(" END")
	return b.String(), args
}

// truncateReason keeps a reason within fail_reason's 1,000 characters, or the column's
// own width when an adopted table's is narrower (scanIndex reads it): a longer reason would
// fail every write-back of its page under strict sql_mode (error 1406).
func (s *store) truncateReason(reason string) string {
	width := maxReasonChars
	s.scanMu.Lock()
	if s.reasonChars > 0 {
		width = min(width, s.reasonChars)
	}
	s.scanMu.Unlock()
	reason = strings.ToValidUTF8(reason, "?")
	if utf8.RuneCountInString(reason) <= width {
		return reason
	}
	r := []rune(reason)
	return string(r[:max(0, width-3)]) + "..."[:min(3, width)]
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func int64Args(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

func failureIDs(fails []failure) []any {
	out := make([]any, len(fails))
	for i, f := range fails {
		out[i] = f.id
	}
	return out
}

// query, queryRow and execStmt run one statement and tell the stall clock when it was sent
// and whether the database answered it (progress).
func (s *store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s.pg.begin()
	rows, err := s.db.QueryContext(ctx, q, args...)
	s.pg.end(err)
	return rows, err
}

func (s *store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	s.pg.begin()
	row := s.db.QueryRowContext(ctx, q, args...)
	s.pg.end(row.Err())
	return row
}

func (s *store) execStmt(ctx context.Context, q string, args ...any) (sql.Result, error) {
	s.pg.begin()
	res, err := s.db.ExecContext(ctx, q, args...)
	s.pg.end(err)
	return res, err
}

// hastenDeferredMax bounds the rows one recovery brings forward: a larger outage's other
// rows wait out their deferral (30 s at most).
const hastenDeferredMax = 100000

// hastenDeferred makes the failed rows whose reason ends with mark and whose next attempt is
// after nowMs due now, and returns how many it changed. The rows are found on the page
// query's index (status, next_retry_time), read without locks, and changed by primary key,
// guarded by their state as read, like every status change.
func (s *store) hastenDeferred(ctx context.Context, nowMs int64, mark string) (int64, error) {
	if err := s.scanIndex(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	where, args := s.partitionWhere(nil)
	rows, err := s.query(ctx, `SELECT id FROM `+s.table+s.scanHint+`
		WHERE `+where+`status = 1 AND next_retry_time > ? AND fail_reason LIKE ? ORDER BY next_retry_time LIMIT ?`,
		append(args, nowMs, "%"+likeEscape(mark), hastenDeferredMax)...)
	if err != nil {
		return 0, fmt.Errorf("find deferred rows of %s: %w", s.name, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("find deferred rows of %s: %w", s.name, err)
		}
		ids = append(ids, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("find deferred rows of %s: %w", s.name, err)
	}
	var total int64
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		chunk := ids[start:min(start+maxIDsPerStatement, len(ids))]
		n, err := s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET next_retry_time = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status = 1 AND next_retry_time > ?`,
			append(append([]any{nowMs}, int64Args(chunk)...), nowMs)...)
		total += n
		if err != nil {
			return total, fmt.Errorf("bring %d deferred rows of %s forward: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// likeEscape escapes LIKE's wildcards and escape character in s.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
