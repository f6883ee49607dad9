// SPDX-License-Identifier: Apache-2.0

package outboxsql

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

// Store holds every statement the relay runs against one table. The table name was
// validated when the relay was built; values always go through placeholders.
type Store struct {
	DB *sql.DB
	// Tracker tracks the statements' answers, for the stall clock; nil tracks nothing.
	Tracker Tracker
	// Table is the quoted table name for SQL; Name is the plain one for messages.
	Table, Name string
	// timeout bounds each statement.
	Timeout time.Duration
	// partition, when partitions > 1, restricts the scan and the idle probe to the rows of
	// one partition (schema.PartitionColumn = partition).
	Partition, Partitions int

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
	// positions: the table has its stored-position journal, where the relay records where
	// the broker stored the rows it marks sent; read by scanIndex.
	positions bool
}

// Tracker hears of every statement a Store sends and of how it ended: the relay's stall
// clock (relay/internal/pipeline/progress.go).
type Tracker interface {
	// Begin records that a statement is sent.
	Begin()
	// End records how it ended: err nil or the server's answer, or no answer.
	End(err error)
}

// NowSQL is the database's clock in epoch ms, as the write-backs write it.
const NowSQL = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

// Row is one due outbox row as read by a page.
type Row struct {
	ID          int64
	MsgID       string
	Topic, Tag  string
	Content     []byte
	ContentLen  int64 // content's length in bytes, known even when content is not loaded
	Keys        string
	ShardingKey string
	Properties  sql.NullString
	RetryCount  int
	MaxRetries  int
	NextRetry   int64
	NextNull    bool // next_retry_time is NULL (read as 0: due now)
}

// Cursor is the keyset position within one status: pages resume after (next, id), or, while
// null holds, after id among the rows whose next_retry_time is NULL (due now; they come
// first in the index).
type Cursor struct {
	Null bool
	Next int64
	ID   int64
}

// PageQuery returns the page statement and arguments (the benchmarks EXPLAIN it). Bodies
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
func (s *Store) PageQuery(status int, nowMs int64, c Cursor, limit, maxBody int) (string, []any) {
	where, args := s.partitionWhere([]any{maxBody})
	due := `next_retry_time <= ? AND ((next_retry_time = ? AND id > ?) OR next_retry_time > ?)`
	args = append(args, status)
	if c.Null {
		due = `((next_retry_time IS NULL AND id > ?) OR next_retry_time <= ?)`
		args = append(args, c.ID, nowMs)
	} else {
		args = append(args, nowMs, c.Next, c.ID, c.Next)
	}
	// NULLs of an adopted table's nullable columns read as the contract's defaults, so that
	// no row fails its page; a NULL msg_id or topic then makes the row dead with a reason.
	return `SELECT id, COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, ''), IF(LENGTH(content) <= ?, content, NULL), COALESCE(LENGTH(content), 0),
			COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), properties, ` + schema.RetryCountSQL + `, ` + schema.MaxRetrySQL + `,
			next_retry_time IS NULL, ` + schema.NextRetrySQL + `
		FROM ` + s.Table + s.scanHint + `
		WHERE ` + where + `status = ? AND ` + due + ` AND ` + schema.NotDeletedSQL + `
		ORDER BY next_retry_time, id LIMIT ?`, append(args, limit)
}

// partitionWhere returns the partition condition ("" for an unpartitioned table) and args
// followed by its argument.
func (s *Store) partitionWhere(args []any) (string, []any) {
	if s.Partitions <= 1 {
		return "", args
	}
	return schema.QuoteIdent(schema.PartitionColumn) + " = ? AND ", append(args, s.Partition)
}

// AnyDue reports whether a row may be due by the database's clock: one statement of two
// index range seeks that the idle relay runs instead of a pass (soft-deleted rows may make it
// say yes; the pass then finds nothing, as it would have anyway).
func (s *Store) AnyDue(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	var n int
	// Two ranges of the (status, next_retry_time) index, or of the partition's index one
	// level down (key_len 12: every part used).
	where, args := s.partitionWhere(nil)
	err := s.QueryRow(ctx, `SELECT COUNT(*) FROM (SELECT 1 FROM `+s.Table+`
		WHERE `+where+`status IN (0, 1) AND (next_retry_time <= `+NowSQL+` OR next_retry_time IS NULL) LIMIT 1) due`, args...).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("probe due rows of %s: %w", s.Name, err)
	}
	return n > 0, nil
}

// ScanIndex finds the table's (status, next_retry_time) index once and makes the page query
// force it. Unforced, MariaDB 10.11 plans the keyset query as a ref on status alone as soon
// as the table's statistics are current (InnoDB refreshes them once a tenth of the table
// changed): every page then walks the status's entries from the first, rows already read
// and the delete-marked entries of rows written back but not yet purged included, so pages
// cost more and more as a large backlog drains. Forced, it is the bounded range the keyset
// is written for (key_len 17). The index is found by its columns, as schema.Check checks
// it, since an adopted table may name it otherwise; without one the query goes unforced.
func (s *Store) ScanIndex(ctx context.Context) error {
	s.scanMu.Lock()
	defer s.scanMu.Unlock()
	if s.scanDone {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	cols := "status,next_retry_time"
	if s.Partitions > 1 {
		cols = schema.PartitionColumn + "," + cols
	}
	var err error
	if s.scanHint, err = s.indexHint(ctx, cols); err != nil {
		return err
	}
	if err = s.lookCheckIndex(ctx); err != nil {
		return err
	}
	if s.reasonChars, err = FailReasonWidth(ctx, s.DB, s.Name); err != nil {
		return err
	}
	if s.positions, err = schema.HasStoredLog(ctx, s.DB, s.Name); err != nil {
		return err
	}
	s.scanDone = true
	return nil
}

// FailReasonWidth returns the characters table's fail_reason column holds (0 when it has
// none), so that the relay and its audit cut their reasons to an adopted table's width.
func FailReasonWidth(ctx context.Context, db *sql.DB, table string) (int, error) {
	var n sql.NullInt64
	var dataType string
	err := db.QueryRowContext(ctx, `SELECT DATA_TYPE, CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'fail_reason'`, table).Scan(&dataType, &n)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("read the width of %s.fail_reason: %w", table, err)
	case strings.HasSuffix(strings.ToLower(dataType), "text"):
		return int(min(n.Int64/4, 1<<20)), nil // bytes: room for four-byte characters
	}
	return int(n.Int64), nil
}

// indexHint returns a FORCE INDEX clause for the table's index of exactly cols (lower-case,
// comma-separated), or "" when it has none.
func (s *Store) indexHint(ctx context.Context, cols string) (string, error) {
	s.begin()
	name, err := schema.IndexByColumns(ctx, s.DB, s.Name, cols)
	s.end(err)
	if err != nil || name == "" {
		return "", err
	}
	return " FORCE INDEX (`" + strings.ReplaceAll(name, "`", "``") + "`)", nil
}

// OrderKey identifies one ordered stream: a sharding key within a topic.
type OrderKey struct{ Topic, Key string }

// Park makes the pending rows ids, held behind the unsent row head of their key that is not
// due before untilMs, due at untilMs, their reason naming head (parkedReason): the scan stops
// reading them until their head may go. Only pending rows due earlier are moved; the status
// is not touched.
func (s *Store) Park(ctx context.Context, ids []int64, untilMs, head int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return s.inChunks(len(ids), "park %d held rows of %s", func(start, end int) (int64, error) {
		chunk := ids[start:end]
		args := append([]any{untilMs, ParkedReason(head)}, int64Args(chunk)...)
		args = append(args, untilMs)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET next_retry_time = ?, fail_reason = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status = 0 AND `+schema.NextRetrySQL+` < ? AND `+schema.NotDeletedSQL, args...)
	})
}

// Unpark makes the pending rows of the ordered stream k after id, parked at untilMs behind
// it (park), due at nowMs: their head was sent or went dead before its time. Like every
// change, the rows are found by a read without locks and changed by primary key, guarded.
func (s *Store) Unpark(ctx context.Context, k OrderKey, id, untilMs, nowMs int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	rows, err := s.Query(ctx, `SELECT id FROM `+s.Table+`
		WHERE sharding_key = ? AND topic = ? AND status = 0 AND id > ? AND next_retry_time = ? AND `+schema.NotDeletedSQL,
		k.Key, k.Topic, id, untilMs)
	if err != nil {
		return 0, fmt.Errorf("find parked rows of %s: %w", s.Name, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("find parked rows of %s: %w", s.Name, err)
		}
		ids = append(ids, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("find parked rows of %s: %w", s.Name, err)
	}
	return s.inChunks(len(ids), "unpark %d rows of %s", func(start, end int) (int64, error) {
		chunk := ids[start:end]
		args := append([]any{nowMs}, int64Args(chunk)...)
		args = append(args, untilMs)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET next_retry_time = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status = 0 AND next_retry_time = ? AND `+schema.NotDeletedSQL, args...)
	})
}

// MaxIDsPerStatement bounds an IN list.
const MaxIDsPerStatement = 1000

// inChunks is the chunk loop of every statement over a list of rows: it calls run for each
// run [start, end) of at most MaxIDsPerStatement of the n items, and returns the sum of the
// rows the calls changed. It stops at the first error, wrapped with doing, a format taking
// the chunk's length and the table's name ("mark %d rows of %s sent").
func (s *Store) inChunks(n int, doing string, run func(start, end int) (int64, error)) (int64, error) {
	var total int64
	for start := 0; start < n; start += MaxIDsPerStatement {
		end := min(start+MaxIDsPerStatement, n)
		changed, err := run(start, end)
		total += changed
		if err != nil {
			return total, fmt.Errorf(doing+": %w", end-start, s.Name, err)
		}
	}
	return total, nil
}

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
func (s *Store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	res, err := s.execStmt(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// MarkSent sets the acknowledged rows, which had retryCount failures when they were read,
// sent, at nowMs: sent_time and next_retry_time both (a settled row's next_retry_time is
// when it was settled, so that the purge and the dashboard find old and recent sent rows on
// the (status, next_retry_time) index the row moves in anyway; see schema.obsoleteIndexes). Rows changed meanwhile (by another relay, or an operator) are left alone: the guard
// on retry_count keeps a newer failure or requeue. The number changed is returned.
func (s *Store) MarkSent(ctx context.Context, retryCount int, ids []int64, nowMs int64) (int64, error) {
	return s.inChunks(len(ids), "mark %d rows of %s sent", func(start, end int) (int64, error) {
		chunk := ids[start:end]
		args := append([]any{nowMs, nowMs}, int64Args(chunk)...)
		args = append(args, retryCount)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
	})
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

// Failure is one failed row of a write-back.
type Failure struct {
	ID     int64
	Reason string
}

// MarkRetry records a failed attempt of rows that had retryCount failures before: the count
// goes up by one, and the row goes dead when it exceeds max_retry_count, else waits until
// nextMs. The guard on retry_count makes a second relay's concurrent write a no-op.
func (s *Store) MarkRetry(ctx context.Context, retryCount int, fails []Failure, nextMs int64) (int64, error) {
	return s.inChunks(len(fails), "record %d failed attempts in %s", func(start, end int) (int64, error) {
		chunk := fails[start:end]
		reasonSQL, reasonArgs := s.reasonCase(chunk)
		args := []any{boundedCount(retryCount + 1), retryCount + 1, retryCount + 1, boundedTime(nextMs)}
		args = append(args, reasonArgs...)
		args = append(args, failureIDs(chunk)...)
		args = append(args, retryCount)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET retry_count = ?,
			status = CASE WHEN ? > `+schema.MaxRetrySQL+` THEN 3 ELSE 1 END,
			next_retry_time = CASE WHEN ? > `+schema.MaxRetrySQL+` THEN `+settledNowSQL+` ELSE ? END, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
	})
}

// MarkTransientRetry records a transient failure that singled its rows out: the count goes
// up by one but never past max_retry_count, and the rows stay failed: a timeout or a
// dropped connection never makes a message dead.
func (s *Store) MarkTransientRetry(ctx context.Context, retryCount int, fails []Failure, nextMs int64) (int64, error) {
	return s.inChunks(len(fails), "record %d failed attempts in %s", func(start, end int) (int64, error) {
		chunk := fails[start:end]
		reasonSQL, reasonArgs := s.reasonCase(chunk)
		args := []any{boundedCount(retryCount + 1), boundedTime(nextMs)}
		args = append(args, reasonArgs...)
		args = append(args, failureIDs(chunk)...)
		args = append(args, retryCount)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET retry_count = LEAST(?, `+schema.MaxRetrySQL+`),
			status = 1, next_retry_time = ?, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
	})
}

// MarkDeferred records an attempt that failed in a broker incident: the rows, which had
// retryCount failures, wait until nextMs with their retry counts untouched, and say why in
// fail_reason. The guard on retry_count keeps a newer failure another relay recorded.
func (s *Store) MarkDeferred(ctx context.Context, retryCount int, fails []Failure, nextMs int64) (int64, error) {
	return s.inChunks(len(fails), "defer %d rows of %s", func(start, end int) (int64, error) {
		chunk := fails[start:end]
		reasonSQL, reasonArgs := s.reasonCase(chunk)
		args := append([]any{boundedTime(nextMs)}, reasonArgs...)
		args = append(args, failureIDs(chunk)...)
		args = append(args, retryCount)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET status = 1, next_retry_time = ?, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`, args...)
	})
}

// MarkSentPerRow is markSent with one autocommitted UPDATE per row, the way seed 002's relay
// wrote back. For the benchmark only (Config.perRowWriteBack): it is the baseline that
// the set-based markSent is measured against.
func (s *Store) MarkSentPerRow(ctx context.Context, _ int, ids []int64, nowMs int64) (int64, error) {
	var total int64
	for _, id := range ids {
		res, err := s.execStmt(ctx, `UPDATE `+s.Table+` SET status = 2, sent_time = ?
			WHERE id = ? AND status IN (0, 1)`, nowMs, id)
		if err != nil {
			return total, fmt.Errorf("mark row %d of %s sent: %w", id, s.Name, err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// MarkRetryPerRow is markRetry with one autocommitted UPDATE per row. For the benchmark only
// (Config.perRowWriteBack).
func (s *Store) MarkRetryPerRow(ctx context.Context, retryCount int, fails []Failure, nextMs int64) (int64, error) {
	var total int64
	for _, f := range fails {
		res, err := s.execStmt(ctx, `UPDATE `+s.Table+` SET retry_count = ?,
			status = CASE WHEN ? > `+schema.MaxRetrySQL+` THEN 3 ELSE 1 END, next_retry_time = ?, fail_reason = ?
			WHERE id = ? AND status IN (0, 1) AND `+schema.RetryCountSQL+` = ?`,
			retryCount+1, retryCount+1, nextMs, s.truncateReason(f.Reason), f.ID, retryCount)
		if err != nil {
			return total, fmt.Errorf("record failed attempt of row %d in %s: %w", f.ID, s.Name, err)
		}
		n, _ := res.RowsAffected()
		total += n
	}
	return total, nil
}

// settledNowSQL is the database's clock in epoch ms: the next_retry_time of a row going dead
// (a settled row's next_retry_time is when it was settled; see MarkSent).
const settledNowSQL = NowSQL

// MarkDead parks rows that can never be sent, with their reasons.
func (s *Store) MarkDead(ctx context.Context, fails []Failure) (int64, error) {
	return s.inChunks(len(fails), "mark %d rows of %s dead", func(start, end int) (int64, error) {
		chunk := fails[start:end]
		reasonSQL, args := s.reasonCase(chunk)
		args = append(args, failureIDs(chunk)...)
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET status = 3, next_retry_time = `+settledNowSQL+`, fail_reason = `+reasonSQL+`
			WHERE id IN (`+placeholders(len(chunk))+`) AND status IN (0, 1)`, args...)
	})
}

// Backlog returns the unsent rows (pending or failed; rows marked is_deleted = 1 are never
// sent and left out, at the cost of reading the backlog's rows, not only the index: 0.4 s
// instead of 0.2 s for 500k rows) and how long the oldest due row has been due
// (ops.OldestDue, as the status command reports it).
func (s *Store) Backlog(ctx context.Context, now time.Time) (pending int64, oldestDue time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	err = s.QueryRow(ctx, `SELECT COUNT(*) FROM `+s.Table+` WHERE status IN (0, 1) AND `+schema.NotDeletedSQL).Scan(&pending)
	if err != nil {
		return 0, 0, fmt.Errorf("count backlog of %s: %w", s.Name, err)
	}
	oldestDue, err = ops.OldestDue(ctx, s.DB, s.Name, now)
	return pending, oldestDue, err
}

// CountDead returns the number of the table's dead rows, for the relay's sample, by the
// statement the status command runs (package ops), bounded by the store's timeout.
func (s *Store) CountDead(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return ops.CountDead(ctx, s.DB, s.Name, ops.Filter{})
}

// CountUnknown returns the number of the table's rows of a status the relay does not know,
// by the status command's statement (package ops), bounded by the store's timeout.
func (s *Store) CountUnknown(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return ops.CountUnknown(ctx, s.DB, s.Name)
}

// reasonCase returns the SQL expression and arguments that set each row's own reason: a
// single placeholder when all reasons agree, as they do when the broker is down.
func (s *Store) reasonCase(fails []Failure) (string, []any) {
	same := true
	for _, f := range fails[1:] {
		if f.Reason != fails[0].Reason {
			same = false
			break
		}
	}
	if same {
		return "?", []any{s.truncateReason(fails[0].Reason)}
	}
	var b strings.Builder
	args := make([]any, 0, 2*len(fails))
	b.WriteString("CASE id")
	for _, f := range fails {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, f.ID, s.truncateReason(f.Reason))
	}
	b.WriteString(" END")
	return b.String(), args
}

// truncateReason keeps a reason within fail_reason's 1,000 characters, or the column's
// own width when an adopted table's is narrower (scanIndex reads it): a longer reason would
// fail every write-back of its page under strict sql_mode (error 1406).
func (s *Store) truncateReason(reason string) string {
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

func failureIDs(fails []Failure) []any {
	out := make([]any, len(fails))
	for i, f := range fails {
		out[i] = f.ID
	}
	return out
}

// Query, QueryRow and execStmt run one statement and tell the stall clock when it was sent
// and whether the database answered it (progress).
func (s *Store) Query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	s.begin()
	rows, err := s.DB.QueryContext(ctx, q, args...)
	s.end(err)
	return rows, err
}

func (s *Store) QueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	s.begin()
	row := s.DB.QueryRowContext(ctx, q, args...)
	s.end(row.Err())
	return row
}

func (s *Store) execStmt(ctx context.Context, q string, args ...any) (sql.Result, error) {
	s.begin()
	res, err := s.DB.ExecContext(ctx, q, args...)
	s.end(err)
	return res, err
}

func (s *Store) begin() {
	if s.Tracker != nil {
		s.Tracker.Begin()
	}
}

func (s *Store) end(err error) {
	if s.Tracker != nil {
		s.Tracker.End(err)
	}
}

// hastenDeferredMax bounds the rows one recovery brings forward: a larger outage's other
// rows wait out their deferral (30 s at most).
const hastenDeferredMax = 100000

// HastenDeferred makes the failed rows whose reason ends with mark and whose next attempt is
// after nowMs due now, and returns how many it changed. The rows are found on the page
// query's index (status, next_retry_time), read without locks, and changed by primary key,
// guarded by their state as read, like every status change.
func (s *Store) HastenDeferred(ctx context.Context, nowMs int64, mark string) (int64, error) {
	if err := s.ScanIndex(ctx); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	where, args := s.partitionWhere(nil)
	rows, err := s.Query(ctx, `SELECT id FROM `+s.Table+s.scanHint+`
		WHERE `+where+`status = 1 AND next_retry_time > ? AND fail_reason LIKE ? ORDER BY next_retry_time LIMIT ?`,
		append(args, nowMs, "%"+likeEscape(mark), hastenDeferredMax)...)
	if err != nil {
		return 0, fmt.Errorf("find deferred rows of %s: %w", s.Name, err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, fmt.Errorf("find deferred rows of %s: %w", s.Name, err)
		}
		ids = append(ids, id)
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return 0, fmt.Errorf("find deferred rows of %s: %w", s.Name, err)
	}
	return s.inChunks(len(ids), "bring %d deferred rows of %s forward", func(start, end int) (int64, error) {
		chunk := ids[start:end]
		return s.exec(ctx, `UPDATE `+s.Table+` FORCE INDEX (PRIMARY) SET next_retry_time = ?
			WHERE id IN (`+placeholders(len(chunk))+`) AND status = 1 AND next_retry_time > ?`,
			append(append([]any{nowMs}, int64Args(chunk)...), nowMs)...)
	})
}

// likeEscape escapes LIKE's wildcards and escape character in s.
func likeEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
