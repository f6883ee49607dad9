// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"strings"

	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

// MarkSentAt is MarkSent that also records where the broker stored each row (at[i] for
// ids[i]; nil when unknown) in the table's audit columns, in the same statement: the same
// access path (the primary key, the same guard) as markSent, with each column set by a
// CASE on id, or by one value when every row of the statement shares it.
func (s *Store) MarkSentAt(ctx context.Context, retryCount int, ids []int64, at []*message.Stored, nowMs int64) (int64, error) {
	return s.inChunks(len(ids), "mark %d rows of %s sent", func(start, end int) (int64, error) {
		q, args := s.SentAtQuery(retryCount, ids[start:end], at[start:end], nowMs)
		return s.exec(ctx, q, args...)
	})
}

// SentAtQuery is MarkSentAt's statement for ids (at most MaxIDsPerStatement) and its
// arguments.
func (s *Store) SentAtQuery(retryCount int, ids []int64, at []*message.Stored, nowMs int64) (string, []any) {
	sets, args := storedSets(ids, at)
	args = append([]any{nowMs, nowMs}, args...)
	args = append(append(args, int64Args(ids)...), retryCount)
	return `UPDATE ` + s.Table + ` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?, ` + sets + `
			WHERE id IN (` + placeholders(len(ids)) + `) AND status IN (0, 1) AND ` + schema.RetryCountSQL + ` = ?`, args
}

// storedSets returns the SET clauses of the audit columns for the rows ids and their
// arguments. A previous audit's audited_time is cleared: the row was sent again.
func storedSets(ids []int64, at []*message.Stored) (string, []any) {
	cols := []struct {
		name string
		val  func(*message.Stored) any
	}{
		{"broker_name", func(s *message.Stored) any { return s.Broker }},
		{"queue_id", func(s *message.Stored) any { return s.QueueID }},
		{"queue_offset", func(s *message.Stored) any { return s.Offset }},
		{"offset_msg_id", func(s *message.Stored) any {
			if s.OffsetMsgID == "" {
				return nil
			}
			return s.OffsetMsgID
		}},
	}
	var sets []string
	var args []any
	for _, c := range cols {
		vals := make([]any, len(ids))
		same := true
		for i, p := range at {
			if p != nil {
				vals[i] = c.val(p)
			}
			same = same && vals[i] == vals[0]
		}
		if same {
			sets, args = append(sets, c.name+" = ?"), append(args, vals[0])
			continue
		}
		var b strings.Builder
		b.WriteString(c.name + " = CASE id")
		for i, id := range ids {
			b.WriteString(" WHEN ? THEN ?")
			args = append(args, id, vals[i])
		}
		b.WriteString(" END")
		sets = append(sets, b.String())
	}
	return strings.Join(append(sets, "audited_time = NULL"), ", "), args
}

// HasPositions reports whether the table has the audit columns, so that MarkSentAt can
// record where the broker stored each row (known once the scan is prepared).
func (s *Store) HasPositions() bool { return s.positions }
