// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// keepStored copies what the publisher recorded on the copies sent (traced messages are
// copies) back to the relay's messages.
func keepStored(msgs, sent []*Message) {
	for i := range msgs {
		if sent[i] != msgs[i] {
			msgs[i].Stored = sent[i].Stored
		}
	}
}

// markSentRows marks the sent rows idx (read with retryCount failures) sent with markSent,
// or, when the table has the audit columns and the publisher said where any was stored,
// with MarkSentAt, which records the positions in the same statement.
func (r *Engine) markSentRows(ctx context.Context, markSent func(context.Context, int, []int64, int64) (int64, error),
	retryCount int, rows []outboxsql.Row, results []result, idx []int, nowMs int64) (int64, error) {
	ids := rowIDs(rows, idx)
	if !r.cfg.RecordPositions || !r.store.HasPositions() || r.cfg.PerRowWriteBack {
		return markSent(ctx, retryCount, ids, nowMs)
	}
	at := make([]*message.Stored, len(idx))
	known := false
	for n, i := range idx {
		at[n] = results[i].stored
		known = known || at[n] != nil
	}
	if !known {
		return markSent(ctx, retryCount, ids, nowMs)
	}
	return r.store.MarkSentAt(ctx, retryCount, ids, at, nowMs)
}
