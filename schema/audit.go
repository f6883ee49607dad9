// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
)

// The declarations below are what is left of the broker audit's columns in the outbox
// table, which the stored-position journal replaces (StoredLogDDL); they go once nothing
// reads or writes those columns any more.

// StoredBrokerMax is the longest broker name the former stored_broker column held.
const StoredBrokerMax = 48

// The former audit columns' defaults, read as "not recorded".
const (
	// StoredBrokerNone is stored_broker of a row whose position is not recorded.
	StoredBrokerNone = ""
	// StoredNone is stored_queue, stored_offset and stored_commit_offset not recorded.
	StoredNone = -1
	// AuditTimeNone is stored_audit_time of a row no audit found present.
	AuditTimeNone = 0
)

// auditColumnNames are the former audit columns of the outbox table.
var auditColumnNames = []string{"stored_broker", "stored_queue", "stored_offset", "stored_commit_offset", "stored_audit_time"}

// AuditColumns lists the former audit columns' names.
func AuditColumns() []string { return append([]string(nil), auditColumnNames...) }

// HasAuditColumns reports whether table has every former audit column (tables of
// pre-release builds); migrate no longer adds them.
func HasAuditColumns(ctx context.Context, db *sql.DB, table string) (bool, error) {
	if err := ValidateIdent(table); err != nil {
		return false, err
	}
	found, err := readColumns(ctx, db, table)
	if err != nil {
		return false, err
	}
	for _, c := range auditColumnNames {
		if _, ok := found[c]; !ok {
			return false, nil
		}
	}
	return true, nil
}
