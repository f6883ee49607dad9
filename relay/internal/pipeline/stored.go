// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
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

// markSentRows marks the sent rows idx (read with retryCount failures) sent with markSent.
// When positions are recorded (Config.RecordPositions, and the table has its journal), the
// rows' positions the publisher reported are then handed to the journal's appender as one
// entry settled at nowMs, the rows' next_retry_time: never in the write-back's statement,
// never holding it up.
func (r *Engine) markSentRows(ctx context.Context, markSent func(context.Context, int, []int64, int64) (int64, error),
	retryCount int, rows []outboxsql.Row, results []result, idx []int, nowMs int64) (int64, error) {
	n, err := markSent(ctx, retryCount, rowIDs(rows, idx), nowMs)
	if r.journal == nil || !r.store.HasPositions() || r.cfg.PerRowWriteBack || (err != nil && n == 0) {
		return n, err
	}
	// Even after an error, the statements that succeeded marked their rows at nowMs; rows
	// left unchanged never match the entry (their next_retry_time is not nowMs).
	ps := make([]storedlog.Pos, 0, len(idx))
	for _, i := range idx {
		if p, ok := storedPos(rows[i].ID, results[i].stored); ok {
			ps = append(ps, p)
		}
	}
	if len(ps) > 0 {
		r.journal.add(nowMs, ps)
	}
	return n, err
}

// JournalAppender is the service that appends the sent rows' positions to the table's
// stored-position journal (journal.go); it does nothing without Config.RecordPositions. Its
// owner starts it before the passes and stops it after them: Stop appends what is pending.
func (r *Engine) JournalAppender() startstop.Service { return r.journalSvc }
