// SPDX-License-Identifier: Apache-2.0

package schema

import (
	_ "embed"
	"strings"
)

//go:embed dedupe_table.sql
var dedupeDDL string

// DedupeDefaultTable is the dedupe table name used by package idempotency when none is set.
const DedupeDefaultTable = "outbox_dedupe"

// DedupeDDL returns the CREATE TABLE IF NOT EXISTS statement of a consumer dedupe table, the
// table package idempotency inserts one row into per message applied, in the same
// transaction as the business effect.
//
// The key columns are varbinary so that keys compare byte for byte: under a case-insensitive
// or PAD SPACE collation "SN-1a", "SN-1A" and "SN-1a " would be one key and the second order
// would be skipped as a duplicate. The primary key starts with the consumer group, so two
// consumers of the same message in one database each apply it once. The statement runs
// unchanged on MySQL 8.0+ and MariaDB 10.6+. The table name is checked with ValidateIdent.
func DedupeDDL(table string) (string, error) {
	if err := ValidateIdent(table); err != nil {
		return "", err
	}
	return strings.ReplaceAll(dedupeDDL, "{{TABLE}}", QuoteIdent(table)), nil
}
