// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"fmt"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/schema"
)

// Stored is where the broker said it stored an acknowledged message: what the relay records
// in the table's audit columns, and what the broker audit checks later.
type Stored struct {
	// Broker is the name of the broker whose queue holds the message.
	Broker string
	// QueueID and Offset are the queue and the message's offset in it.
	QueueID int
	Offset  int64
	// OffsetMsgID is the broker's offset message id (store address and commit log offset);
	// empty when the broker gave none for this message.
	OffsetMsgID string
}

// storedOf returns where res says each of n messages sent in one request was stored. A
// batch is stored in one queue in its order at consecutive offsets from res.QueueOffset,
// and the broker answers one offset message id per message, comma-joined (RocketMQ 5.3.3
// and internal/rmqtest both); when the count of ids is not n, no id is recorded.
func storedOf(res *primitive.SendResult, n int) []Stored {
	if res == nil || res.MessageQueue == nil || n <= 0 {
		return nil
	}
	ids := strings.Split(res.OffsetMsgID, ",")
	out := make([]Stored, n)
	for i := range out {
		out[i] = Stored{Broker: res.MessageQueue.BrokerName, QueueID: res.MessageQueue.QueueId, Offset: res.QueueOffset + int64(i)}
		if len(ids) == n && len(ids[i]) <= 64 {
			out[i].OffsetMsgID = ids[i]
		}
	}
	return out
}

// noteStored sets each message's Stored from res.
func noteStored(res *primitive.SendResult, msgs []*Message) {
	for i, s := range storedOf(res, len(msgs)) {
		s := s
		msgs[i].Stored = &s
	}
}

// keepStored copies what the publisher recorded on the copies sent (traced messages are
// copies) back to the relay's messages.
func keepStored(msgs, sent []*Message) {
	for i := range msgs {
		if sent[i] != msgs[i] {
			msgs[i].Stored = sent[i].Stored
		}
	}
}

// markSentAt is markSent that also records where the broker stored each row (at[i] for
// ids[i]; nil when unknown) in the table's audit columns, in the same statement: the same
// access path (the primary key, the same guard) as markSent, with each column set by a
// CASE on id, or by one value when every row of the statement shares it.
func (s *store) markSentAt(ctx context.Context, retryCount int, ids []int64, at []*Stored, nowMs int64) (int64, error) {
	var total int64
	for start := 0; start < len(ids); start += maxIDsPerStatement {
		end := min(start+maxIDsPerStatement, len(ids))
		chunk := ids[start:end]
		q, args := s.sentAtQuery(retryCount, chunk, at[start:end], nowMs)
		n, err := s.exec(ctx, q, args...)
		total += n
		if err != nil {
			return total, fmt.Errorf("mark %d rows of %s sent: %w", len(chunk), s.name, err)
		}
	}
	return total, nil
}

// sentAtQuery is markSentAt's statement for ids (at most maxIDsPerStatement) and its
// arguments.
func (s *store) sentAtQuery(retryCount int, ids []int64, at []*Stored, nowMs int64) (string, []any) {
	sets, args := storedSets(ids, at)
	args = append([]any{nowMs, nowMs}, args...)
	args = append(append(args, int64Args(ids)...), retryCount)
	return `UPDATE ` + s.table + ` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?, ` + sets + `
			WHERE id IN (` + placeholders(len(ids)) + `) AND status IN (0, 1) AND ` + schema.RetryCountSQL + ` = ?`, args
}

// storedSets returns the SET clauses of the audit columns for the rows ids and their
// arguments. A previous audit's audited_time is cleared: the row was sent again.
func storedSets(ids []int64, at []*Stored) (string, []any) {
	cols := []struct {
		name string
		val  func(*Stored) any
	}{
		{"broker_name", func(s *Stored) any { return s.Broker }},
		{"queue_id", func(s *Stored) any { return s.QueueID }},
		{"queue_offset", func(s *Stored) any { return s.Offset }},
		{"offset_msg_id", func(s *Stored) any {
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

// markSentRows marks the sent rows idx (read with retryCount failures) sent with markSent,
// or, when the table has the audit columns and the publisher said where any was stored,
// with markSentAt, which records the positions in the same statement.
func (r *Relay) markSentRows(ctx context.Context, markSent func(context.Context, int, []int64, int64) (int64, error),
	retryCount int, rows []row, results []result, idx []int, nowMs int64) (int64, error) {
	ids := rowIDs(rows, idx)
	if !r.store.positions || r.cfg.perRowWriteBack {
		return markSent(ctx, retryCount, ids, nowMs)
	}
	at := make([]*Stored, len(idx))
	known := false
	for n, i := range idx {
		at[n] = results[i].stored
		known = known || at[n] != nil
	}
	if !known {
		return markSent(ctx, retryCount, ids, nowMs)
	}
	return r.store.markSentAt(ctx, retryCount, ids, at, nowMs)
}
