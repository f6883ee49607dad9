// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
)

// StoredAt is where the broker stored a row's message and when the broker audit last found
// it there, from the table's optional audit columns (schema.AuditColumns). Every field is
// NULL-safe: a column left NULL (a row sent before the columns were added, or by a relay
// that does not record them) reads as its zero value.
type StoredAt struct {
	// Recorded is false when the table has no audit columns.
	Recorded    bool   `json:"recorded"`
	BrokerName  string `json:"broker_name,omitempty"`
	QueueID     *int64 `json:"queue_id,omitempty"`
	QueueOffset *int64 `json:"queue_offset,omitempty"`
	OffsetMsgID string `json:"offset_msg_id,omitempty"`
	// AuditedTime is epoch ms of the last audit that found the message at the broker, 0 for none.
	AuditedTime int64 `json:"audited_time,omitempty"`
}

const sqlStoredAt = "SELECT broker_name, queue_id, queue_offset, offset_msg_id, audited_time FROM {T} WHERE id = ?"

// MessageStoredAt returns where row id of table was stored, by one primary-key read. A table
// without the audit columns answers StoredAt{} and no error (Recorded false); a row that is
// gone answers ErrNoMessage.
func MessageStoredAt(ctx context.Context, db *sql.DB, table string, id int64) (StoredAt, error) {
	s, err := query(sqlStoredAt, table)
	if err != nil {
		return StoredAt{}, err
	}
	var broker, omid sql.NullString
	var queue, offset, audited sql.NullInt64
	err = db.QueryRowContext(ctx, s, id).Scan(&broker, &queue, &offset, &omid, &audited)
	switch {
	case mysqlerr.Number(err) == mysqlerr.UnknownColumn:
		return StoredAt{}, nil
	case errors.Is(err, sql.ErrNoRows):
		return StoredAt{}, ErrNoMessage
	case err != nil:
		return StoredAt{}, fmt.Errorf("read where row %d of %s was stored: %w", id, table, err)
	}
	at := StoredAt{Recorded: true, BrokerName: broker.String, OffsetMsgID: omid.String, AuditedTime: audited.Int64}
	if queue.Valid {
		at.QueueID = &queue.Int64
	}
	if offset.Valid {
		at.QueueOffset = &offset.Int64
	}
	return at, nil
}
