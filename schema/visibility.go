// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrColumnsHidden is returned when a table exists but the account cannot see its columns:
// information_schema.COLUMNS shows a column only to an account holding a privilege on it
// (SELECT, INSERT, UPDATE or REFERENCES), so an account with only CREATE, ALTER and INDEX
// sees the table listed and no column at all. Taking such a table for missing would make
// migrate "create" it (CREATE TABLE IF NOT EXISTS does nothing) and report success.
var ErrColumnsHidden = errors.New("table exists but its columns are hidden from this account")

// columnsHidden reports whether table is listed in information_schema.TABLES (any table
// privilege shows it) although readColumns found no column of it.
func columnsHidden(ctx context.Context, db *sql.DB, table string) error {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table).Scan(&n)
	if err != nil {
		return fmt.Errorf("look for table %s: %w", table, err)
	}
	if n > 0 {
		return fmt.Errorf("table %s: %w: grant SELECT on it (migrate needs SELECT, CREATE, ALTER and INDEX; "+
			"information_schema shows columns only to accounts with a privilege on them)", table, ErrColumnsHidden)
	}
	return nil
}
