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
// it there, from the table's optional audit columns (schema.AuditColumns). A column at its
// default (not recorded: a row sent before the columns were added, or by a relay that does
// not record them) reads as the field's zero value.
type StoredAt struct {
	// Recorded is false when the table has no audit columns.
	Recorded    bool   `json:"recorded"`
	BrokerName  string `json:"broker_name,omitempty"`
	QueueID     *int64 `json:"queue_id,omitempty"`
	QueueOffset *int64 `json:"queue_offset,omitempty"`
	// CommitOffset is the message's commit log offset at the broker (the offset part of its
	// offset message id).
	CommitOffset *int64 `json:"commit_offset,omitempty"`
	// AuditedTime is epoch ms of the last audit that found the message at the broker, 0 for none.
	AuditedTime int64 `json:"audited_time,omitempty"`
}

// sqlStoredAt reads the fixed-width audit columns; sqlStoredAtLegacy the NULLable ones of a
// table not migrated since (their offset message id's last 16 hex digits are its commit
// log offset).
const (
	sqlStoredAt       = "SELECT stored_broker, stored_queue, stored_offset, stored_commit_offset, stored_audit_time FROM {T} WHERE id = ?"
	sqlStoredAtLegacy = "SELECT COALESCE(broker_name, ''), COALESCE(queue_id, -1), COALESCE(queue_offset, -1), " +
		"IF(offset_msg_id REGEXP '^[0-9A-Fa-f]{32,56}$', CAST(CONV(RIGHT(offset_msg_id, 16), 16, 10) AS SIGNED), -1), COALESCE(audited_time, 0) FROM {T} WHERE id = ?"
)

// MessageStoredAt returns where row id of table was stored, by one primary-key read. A table
// without the audit columns answers StoredAt{} and no error (Recorded false); a row that is
// gone answers ErrNoMessage.
func MessageStoredAt(ctx context.Context, db *sql.DB, table string, id int64) (StoredAt, error) {
	var broker string
	var queue, offset, commit, audited int64
	var err error
	for _, stmt := range []string{sqlStoredAt, sqlStoredAtLegacy} {
		var s string
		if s, err = query(stmt, table); err != nil {
			return StoredAt{}, err
		}
		err = db.QueryRowContext(ctx, s, id).Scan(&broker, &queue, &offset, &commit, &audited)
		if mysqlerr.Number(err) != mysqlerr.UnknownColumn {
			break
		}
	}
	switch {
	case mysqlerr.Number(err) == mysqlerr.UnknownColumn:
		return StoredAt{}, nil
	case errors.Is(err, sql.ErrNoRows):
		return StoredAt{}, ErrNoMessage
	case err != nil:
		return StoredAt{}, fmt.Errorf("read where row %d of %s was stored: %w", id, table, err)
	}
	at := StoredAt{Recorded: true, BrokerName: broker, AuditedTime: audited}
	if broker == "" {
		return at, nil
	}
	for _, f := range []struct {
		v   int64
		dst **int64
	}{{queue, &at.QueueID}, {offset, &at.QueueOffset}, {commit, &at.CommitOffset}} {
		if f.v >= 0 {
			v := f.v
			*f.dst = &v
		}
	}
	return at, nil
}
