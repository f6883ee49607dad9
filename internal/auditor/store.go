// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/schema"
)

// store holds the auditor's statements on one table and its stored-position journal. The
// audit reads the journal's entries not yet audited, then, per batch, the rows they name in
// one primary-key read (plain consistent reads, no locks); its only writes are at most one
// repair UPDATE per batch, reaching its rows through the primary key and guarded by the
// send the entry recorded, and one UPDATE of the journal marking entries audited.
type store struct {
	db          *sql.DB
	table, name string // quoted for SQL; plain for messages
	journal     *storedlog.Journal
	reasonChars int
	timeout     time.Duration
}

// candidate is one sent row the audit checks: its position from the journal entry entry
// (an index into the step's entries), settled at settled.
type candidate struct {
	id                     int64
	msgID, topic, tag, key string
	broker                 string
	queue                  int
	offset, settled        int64
	commitOffset           int64 // -1: not recorded
	entry                  int
}

// window is what a read selects: journal entries settled in [from, to], after a cursor,
// never audited unless all; of their rows, those of topic (empty: any).
type window struct {
	from, to int64
	topic    string
	all      bool
}

const dbNowSQL = "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"

func (s *store) now(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var ms int64
	if err := s.db.QueryRowContext(ctx, dbNowSQL).Scan(&ms); err != nil {
		return 0, fmt.Errorf("read the database clock: %w", err)
	}
	return ms, nil
}

// entries returns up to limit journal entries of w after cur, in the journal's audit order.
func (s *store) entries(ctx context.Context, w window, cur storedlog.Cursor, limit int) ([]storedlog.Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.journal.Window(ctx, w.from, w.to, cur, w.all, limit)
}

// sentRow is what the audit reads of a row still sent: settled is its next_retry_time,
// the time of the write-back that marked it sent.
type sentRow struct {
	msgID, topic, tag, key string
	settled, retries       int64
}

// rowsQuery is the statement reading the rows ids still sent.
func (s *store) rowsQuery(ids []int64) (string, []any) {
	return `SELECT id, msg_id, topic, tag, sharding_key, next_retry_time, ` + schema.RetryCountSQL + `
		FROM ` + s.table + ` FORCE INDEX (PRIMARY) WHERE id IN (` + placeholders(len(ids)) + `) AND status = 2`, idArgs(ids)
}

// rows returns the rows ids still sent, by id, in one statement.
func (s *store) rows(ctx context.Context, ids []int64) (map[int64]sentRow, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q, args := s.rowsQuery(ids)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read sent rows of %s to audit: %w", s.name, err)
	}
	defer rows.Close()
	out := make(map[int64]sentRow, len(ids))
	for rows.Next() {
		var id int64
		var r sentRow
		if err := rows.Scan(&id, &r.msgID, &r.topic, &r.tag, &r.key, &r.settled, &r.retries); err != nil {
			return nil, fmt.Errorf("read sent rows of %s to audit: %w", s.name, err)
		}
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read sent rows of %s to audit: %w", s.name, err)
	}
	return out, nil
}

// position is what the lookup is asked about c.
func (c candidate) position() brokeraudit.Position {
	return brokeraudit.Position{Topic: c.topic, Broker: c.broker, QueueID: c.queue, Offset: c.offset,
		OffsetMsgID: offsetMsgID(c.commitOffset), MsgID: c.msgID, SentAt: time.UnixMilli(c.settled)}
}

// offsetMsgID returns an offset message id of the commit log offset commit, "" for none.
// The journal keeps only the offset, not the store host the broker put before it: the
// lookup reads the offset alone (it asks the broker it already talks to), so the host part
// is left zero.
func offsetMsgID(commit int64) string {
	if commit < 0 {
		return ""
	}
	return fmt.Sprintf("%016X%016X", 0, commit)
}

// repair makes the rows ids, still sent by the send their entries recorded (settled[i] is
// ids[i]'s next_retry_time then), due again at nowMs in one statement: status
// failed-will-retry with each row's reason (reasons[i] is ids[i]'s), retry count untouched
// (the broker lost them, not the message's fault); msg_id and keys are the row's, so the
// copy sent is the same message to consumers.
func (s *store) repair(ctx context.Context, ids []int64, reasons []string, settled []int64, nowMs int64) (int64, error) {
	q, args := s.repairQuery(ids, reasons, settled, nowMs)
	return s.exec(ctx, q, args...)
}

// repairQuery is repair's statement and its arguments.
func (s *store) repairQuery(ids []int64, reasons []string, settled []int64, nowMs int64) (string, []any) {
	reason, reasonArgs := perRow(ids, reasons, s.cut)
	guard, guardArgs := perRow(ids, settled, func(v int64) int64 { return v })
	args := append(append([]any{nowMs}, reasonArgs...), idArgs(ids)...)
	return `UPDATE ` + s.table + ` FORCE INDEX (PRIMARY) SET status = 1, next_retry_time = ?, fail_reason = ` + reason + `
		WHERE id IN (` + placeholders(len(ids)) + `) AND status = 2 AND next_retry_time = ` + guard, append(args, guardArgs...)
}

// perRow returns the SQL expression and arguments giving each row ids[i] the value
// f(vals[i]): one placeholder when they all agree, else CASE id (the lookup's reasons name
// each row's offset, so the rows of a batch lost together mostly differ).
func perRow[T comparable](ids []int64, vals []T, f func(T) T) (string, []any) {
	if !slices.ContainsFunc(vals, func(v T) bool { return v != vals[0] }) {
		return "?", []any{f(vals[0])}
	}
	var b strings.Builder
	args := make([]any, 0, 2*len(ids))
	b.WriteString("CASE id")
	for i, id := range ids {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, id, f(vals[i]))
	}
	b.WriteString(" END")
	return b.String(), args
}

// cut keeps reason within the table's fail_reason width.
func (s *store) cut(reason string) string {
	if s.reasonChars > 0 && utf8.RuneCountInString(reason) > s.reasonChars {
		return string([]rune(reason)[:s.reasonChars])
	}
	return reason
}

// markAudited records nowMs as the audit time of the journal entries seqs, in one statement.
func (s *store) markAudited(ctx context.Context, seqs []int64, nowMs int64) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return s.journal.MarkAudited(ctx, seqs, nowMs)
}

func (s *store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	res, err := s.db.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("audit write-back on %s: %w", s.name, err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

func idArgs(ids []int64) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}
