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
	"github.com/outbox-relay/outbox-relay/schema"
)

// store holds the auditor's statements on one table. Reads are plain consistent reads (no
// locks); the two UPDATEs (each at most once per batch) reach their rows through the
// primary key, guarded by status sent and by the send the audit read, so that a row sent
// again meanwhile is left alone.
type store struct {
	db          *sql.DB
	table, name string // quoted for SQL; plain for messages
	hint        string // FORCE INDEX of the (status, next_retry_time) index, or ""
	reasonChars int
	timeout     time.Duration
}

// candidate is one sent row the audit checks.
type candidate struct {
	id                       int64
	msgID, topic, tag, key   string
	broker                   string
	queue                    int
	offset, settled, retries int64
	commitOffset             int64 // schema.StoredNone: not recorded
}

// cursor is the keyset position of the audit in the (status, next_retry_time) index: sent
// rows in the order they were settled, then by id.
type cursor struct{ settled, id int64 }

// window is what a read selects: sent rows settled in [from, to], after cur, of topic
// (empty: any), never audited present unless all.
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

// readQuery returns the statement reading up to limit candidates of w after cur.
func (s *store) readQuery(w window, cur cursor, limit int) (string, []any) {
	from := max(w.from, cur.settled)
	args := []any{w.to, from, cur.id, from}
	q := `SELECT id, msg_id, topic, tag, sharding_key, stored_broker, stored_queue, stored_offset, stored_commit_offset,
			next_retry_time, ` + schema.RetryCountSQL + `
		FROM ` + s.table + s.hint + `
		WHERE status = 2 AND next_retry_time <= ? AND ((next_retry_time = ? AND id > ?) OR next_retry_time > ?)
			AND stored_broker <> '' AND stored_queue >= 0 AND stored_offset >= 0`
	if !w.all {
		q += ` AND stored_audit_time = 0`
	}
	if w.topic != "" {
		q += ` AND topic = ?`
		args = append(args, w.topic)
	}
	return q + ` ORDER BY next_retry_time, id LIMIT ?`, append(args, limit)
}

// read returns up to limit candidates of w after cur, in the index's order.
func (s *store) read(ctx context.Context, w window, cur cursor, limit int) ([]candidate, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	q, args := s.readQuery(w, cur, limit)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read sent rows of %s to audit: %w", s.name, err)
	}
	defer rows.Close()
	var out []candidate
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.id, &c.msgID, &c.topic, &c.tag, &c.key, &c.broker, &c.queue, &c.offset, &c.commitOffset,
			&c.settled, &c.retries); err != nil {
			return nil, fmt.Errorf("read sent rows of %s to audit: %w", s.name, err)
		}
		out = append(out, c)
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
// The table keeps only the offset (stored_commit_offset), not the store host the broker
// put before it: the lookup reads the offset alone (it asks the broker it already talks
// to), so the host part is left zero.
func offsetMsgID(commit int64) string {
	if commit < 0 {
		return ""
	}
	return fmt.Sprintf("%016X%016X", 0, commit)
}

// markPresent records nowMs as the audit time of the rows ids, still sent by the send read
// (settled at or before settledMax).
func (s *store) markPresent(ctx context.Context, ids []int64, settledMax, nowMs int64) (int64, error) {
	args := append([]any{nowMs}, idArgs(ids)...)
	return s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET stored_audit_time = ?
		WHERE id IN (`+placeholders(len(ids))+`) AND status = 2 AND next_retry_time <= ?`, append(args, settledMax)...)
}

// repair makes the rows ids, still sent by the send read, due again at nowMs in one
// statement: status failed-will-retry with each row's reason (reasons[i] is ids[i]'s), retry
// count untouched (the broker lost them, not the message's fault), their recorded position
// cleared; msg_id and keys are the row's, so the copy sent is the same message to consumers.
func (s *store) repair(ctx context.Context, ids []int64, reasons []string, settledMax, nowMs int64) (int64, error) {
	reason, reasonArgs := s.reasonExpr(ids, reasons)
	args := append(append([]any{nowMs}, reasonArgs...), idArgs(ids)...)
	return s.exec(ctx, `UPDATE `+s.table+` FORCE INDEX (PRIMARY) SET status = 1, next_retry_time = ?, fail_reason = `+reason+`,
			stored_broker = '', stored_queue = -1, stored_offset = -1, stored_commit_offset = -1, stored_audit_time = 0
		WHERE id IN (`+placeholders(len(ids))+`) AND status = 2 AND next_retry_time <= ?`, append(args, settledMax)...)
}

// reasonExpr returns the SQL expression and arguments setting each row's reason: one
// placeholder when they all agree, else CASE id (the lookup's reasons name each row's
// offset, so the rows of a batch lost together mostly differ).
func (s *store) reasonExpr(ids []int64, reasons []string) (string, []any) {
	if !slices.ContainsFunc(reasons, func(r string) bool { return r != reasons[0] }) {
		return "?", []any{s.cut(reasons[0])}
	}
	var b strings.Builder
	args := make([]any, 0, 2*len(ids))
	b.WriteString("CASE id")
	for i, id := range ids {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, id, s.cut(reasons[i]))
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
