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
// tree of IF on id (idTree), or by one value when every row of the statement shares it.
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
// arguments. A previous audit's time is cleared: the row was sent again. Every value has
// its column's width (schema.AuditColumns), so the row keeps its length.
func storedSets(ids []int64, at []*message.Stored) (string, []any) {
	vals := make([]storedRow, len(at))
	for i, p := range at {
		vals[i] = storedValues(p)
	}
	cols := []struct {
		name string
		val  func(storedRow) any
	}{
		{"stored_broker", func(v storedRow) any { return v.broker }},
		{"stored_queue", func(v storedRow) any { return int64(v.queue) }},
		{"stored_offset", func(v storedRow) any { return v.offset }},
		{"stored_commit_offset", func(v storedRow) any { return v.commit }},
	}
	var sets []string
	var args []any
	for _, c := range cols {
		col := make([]any, len(vals))
		for i, v := range vals {
			col[i] = c.val(v)
		}
		var b strings.Builder
		b.WriteString(c.name + " = ")
		args = idTree(&b, args, sortedByID(ids, col))
		sets = append(sets, b.String())
	}
	return strings.Join(append(sets, "stored_audit_time = 0"), ", "), args
}

// storedRow is one row's values of the audit columns.
type storedRow struct {
	broker         string
	queue          int
	offset, commit int64
}

// storedValues returns what the audit columns record of p: the columns' defaults (not
// recorded) for nil, or for a broker name the column cannot hold unchanged (see
// schema.StoredBrokerMax), which a strict server would refuse and a lax one mangle.
func storedValues(p *message.Stored) storedRow {
	none := storedRow{broker: schema.StoredBrokerNone, queue: schema.StoredNone, offset: schema.StoredNone, commit: schema.StoredNone}
	if p == nil || !brokerFits(p.Broker) || p.QueueID < 0 || p.Offset < 0 {
		return none
	}
	commit, ok := p.CommitLogOffset()
	if !ok {
		commit = schema.StoredNone
	}
	return storedRow{broker: p.Broker, queue: p.QueueID, offset: p.Offset, commit: commit}
}

// brokerFits reports whether name is stored in stored_broker as it is: 1 to
// schema.StoredBrokerMax printable ASCII characters, not starting or ending with a space
// (which a CHAR column drops).
func brokerFits(name string) bool {
	if name == "" || len(name) > schema.StoredBrokerMax || name[0] == ' ' || name[len(name)-1] == ' ' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if name[i] < ' ' || name[i] > '~' {
			return false
		}
	}
	return true
}

// HasPositions reports whether the table has the audit columns, so that MarkSentAt can
// record where the broker stored each row (known once the scan is prepared).
func (s *Store) HasPositions() bool { return s.positions }
