// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"fmt"
	"strings"
)

// An adopted table may declare contract columns nullable (Check reports them, and Plan makes
// them NOT NULL). Until then every statement of the relay and of the operator commands reads
// a NULL as below (docs/decisions.md, "NULLs in an adopted table"): nothing is lost, nothing
// is sent twice, nothing is ignored without being counted.
//   - retry_count NULL is 0 failures: the row is read, and guarded on write-back, as 0.
//   - max_retry_count NULL is the contract's default, 3.
//   - next_retry_time NULL is due now (as 0, due since its creation).
//   - is_deleted NULL is not deleted: only a non-zero value keeps a row from being sent.
//   - status NULL (like any value outside 0-4) is unknown: never sent, never purged, counted
//     and reported as unknown.
const (
	// RetryCountSQL is a row's retry_count, NULL read as 0.
	RetryCountSQL = "COALESCE(retry_count, 0)"
	// MaxRetrySQL is a row's max_retry_count, NULL read as the contract's default.
	MaxRetrySQL = "COALESCE(max_retry_count, 3)"
	// NotDeletedSQL holds for a row that is not soft-deleted, is_deleted NULL included.
	NotDeletedSQL = "COALESCE(is_deleted, 0) = 0"
	// NextRetrySQL is a row's next_retry_time, NULL read as 0 (due since its creation).
	NextRetrySQL = "COALESCE(next_retry_time, 0)"
)

// NullStatusReason is the fail_reason Plan's backfill writes on the rows of NULL status it
// parks dead: nobody can tell whether such a row was sent, so it is neither sent nor lost
// but left for an operator to requeue.
const NullStatusReason = "status was NULL: parked dead by outbox-relay migrate; requeue to send"

// backfilled reports whether c is NOT NULL in the contract with a default, the value Plan
// gives its NULLs before making it NOT NULL. msg_id, topic and content have none: the relay
// marks a row dead when one of them is NULL, and no value can be made up for them.
func (c column) backfilled() bool { return strings.Contains(c.def, "NOT NULL DEFAULT") }

// nullSteps returns the steps that make the nullable columns names NOT NULL without changing
// their types: the rows of NULL status parked dead (NullStatusReason), every other NULL set
// to its column's default, each in primary key ranges (Step.Backfill), then one online
// ALTER that makes the columns NOT NULL with their defaults. The backfill of defaults keeps
// update_time as it was, so that the purge still sees a row's age; a row parked dead gets
// a new one, as every row going dead does (`dead list --older-than` counts from there).
func nullSteps(table string, names []string, found map[string]columnInfo) []Step {
	q := QuoteIdent(table)
	keepUpdated := ", `update_time` = `update_time`"
	var steps []Step
	var sets, nulls, mods []string
	for _, name := range names {
		c, ci := columnByName(name), found[name]
		def := nullDefault(c, ci)
		if name == "update_time" {
			keepUpdated = ""
		}
		if name == "status" {
			reason := NullStatusReason
			if ci := found["fail_reason"]; ci.maxLen.Valid && ci.maxLen.Int64 < int64(len(reason)) {
				reason = reason[:ci.maxLen.Int64]
			}
			steps = append(steps, Step{
				SQL: "UPDATE " + q + " SET `status` = 3, `next_retry_time` = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), `fail_reason` = '" +
					reason + "' WHERE (`status` IS NULL)",
				Online: true, Backfill: true,
			})
		} else {
			sets = append(sets, fmt.Sprintf("%s = COALESCE(%s, %s)", QuoteIdent(name), QuoteIdent(name), def))
			nulls = append(nulls, QuoteIdent(name)+" IS NULL")
		}
		mods = append(mods, fmt.Sprintf("MODIFY COLUMN %s %s", QuoteIdent(name), notNullDefinition(ci, def)))
	}
	if len(sets) > 0 {
		steps = append(steps, Step{
			SQL:    "UPDATE " + q + " SET " + strings.Join(sets, ", ") + keepUpdated + " WHERE (" + strings.Join(nulls, " OR ") + ")",
			Online: true, Backfill: true,
		})
	}
	alter := strings.Join(mods, ", ")
	return append(steps, Step{SQL: fmt.Sprintf("ALTER TABLE %s %s, %s", q, alter, onlineClause), Alter: alter, Online: true})
}

// nullDefault is the default a nullable column keeps (its own, when it has one) or gets (the
// contract's), as an SQL expression.
func nullDefault(c column, ci columnInfo) string {
	d := strings.TrimSpace(ci.deflt.String)
	isTime := ci.dataType == "datetime" || ci.dataType == "timestamp"
	switch {
	case !ci.deflt.Valid || strings.EqualFold(d, "NULL"):
		_, d, _ = strings.Cut(c.def, "DEFAULT ")
		d, _, _ = strings.Cut(d, " ON UPDATE")
		if isTime {
			d += timePrecision(ci.columnType)
		}
		return d
	case isTime && strings.HasPrefix(strings.ToLower(d), "current_timestamp"), strings.HasPrefix(d, "'"):
		return d // MariaDB gives the default as an expression
	case strings.Trim(d, "-0123456789") == "":
		return d
	}
	return "'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(d) + "'"
}

// timePrecision returns the fractional seconds of a datetime or timestamp column type, as
// CURRENT_TIMESTAMP needs them: "(3)" for datetime(3), else "".
func timePrecision(columnType string) string {
	if i := strings.IndexByte(columnType, '('); i >= 0 {
		return columnType[i:]
	}
	return ""
}

// notNullDefinition is a column's own definition (type, character set, ON UPDATE, comment)
// made NOT NULL with default def: MODIFY replaces the whole definition.
func notNullDefinition(ci columnInfo, def string) string {
	d := ci.columnType
	if ci.charset.Valid && ci.collation.Valid {
		d += " CHARACTER SET " + ci.charset.String + " COLLATE " + ci.collation.String
	}
	d += " NOT NULL DEFAULT " + def
	if i := strings.Index(ci.extra, "on update"); i >= 0 {
		d += " " + strings.ToUpper(ci.extra[i:])
	}
	return d + commentClause(ci.comment)
}
