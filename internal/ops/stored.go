// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/schema"
)

// StoredAt is where the broker stored a sent row's message by its current send and whether
// the broker audit has finished checking it, from the table's stored-position journal
// (schema.StoredLogTable). A send the journal does not hold (sent before the journal
// existed, with the audit off, or not appended yet) reads as Recorded with no broker.
type StoredAt struct {
	// Recorded is false when the table has no stored-position journal.
	Recorded    bool   `json:"recorded"`
	BrokerName  string `json:"broker_name,omitempty"`
	QueueID     *int64 `json:"queue_id,omitempty"`
	QueueOffset *int64 `json:"queue_offset,omitempty"`
	// CommitOffset is the message's commit log offset at the broker (the offset part of its
	// offset message id).
	CommitOffset *int64 `json:"commit_offset,omitempty"`
	// AuditedTime is epoch ms the audit finished the journal entry of the send (every row of
	// the entry answered for: this one found at the broker), 0 for none.
	AuditedTime int64 `json:"audited_time,omitempty"`
}

// sqlSentBy reads what names a row's current send: its status and next_retry_time (a sent
// row's is the time of the write-back that marked it sent).
const sqlSentBy = "SELECT COALESCE(status, -1), COALESCE(next_retry_time, 0) FROM {T} WHERE id = ?"

// MessageStoredAt returns where row id of table was stored by its current send: one
// primary-key read of the row, and for a sent row one read of the journal's entries of that
// send. A table without the journal answers StoredAt{} and no error (Recorded false); a row
// that is gone answers ErrNoMessage.
func MessageStoredAt(ctx context.Context, db *sql.DB, table string, id int64) (StoredAt, error) {
	q, err := query(sqlSentBy, table)
	if err != nil {
		return StoredAt{}, err
	}
	var status, settled int64
	switch err := db.QueryRowContext(ctx, q, id).Scan(&status, &settled); {
	case errors.Is(err, sql.ErrNoRows):
		return StoredAt{}, ErrNoMessage
	case err != nil:
		return StoredAt{}, fmt.Errorf("read where row %d of %s was stored: %w", id, table, err)
	}
	has, err := schema.HasStoredLog(ctx, db, table)
	if err != nil || !has {
		return StoredAt{}, err
	}
	at := StoredAt{Recorded: true}
	if status != 2 {
		return at, nil
	}
	j, err := storedlog.Open(db, table)
	if err != nil {
		return StoredAt{}, err
	}
	f, ok, err := j.Find(ctx, id, settled)
	if err != nil || !ok {
		return at, err
	}
	queue, offset := int64(f.QueueID), f.Offset
	at.BrokerName, at.QueueID, at.QueueOffset, at.AuditedTime = f.Broker, &queue, &offset, f.AuditedMs
	if f.CommitOffset >= 0 {
		commit := f.CommitOffset
		at.CommitOffset = &commit
	}
	return at, nil
}
