// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// auditColumns record where the broker stored each acknowledged message and when the
// auditor last found it there. They are fixed-width and NOT NULL, present from the insert
// with defaults that mean "not recorded" (StoredBrokerNone, StoredNone, AuditTimeNone), so
// that the write-back recording them changes no field's length and InnoDB updates the row
// in place (docs/decisions.md, "Broker audit: positions written in place"). They are
// optional: a table without them is relayed as before, with nothing recorded and the audit
// off; Check reports them as "missing audit column" (not fatal) and Plan adds them online,
// instantly where the server can.
var auditColumns = []column{
	{"stored_broker", []string{"char"}, "char(" + storedBrokerWidth + ") CHARACTER SET ascii NOT NULL DEFAULT '' COMMENT 'broker that acknowledged the send; empty: not recorded'", 0},
	{"stored_queue", []string{"int"}, "int NOT NULL DEFAULT -1 COMMENT 'queue of the acknowledged send; -1: not recorded'", 0},
	{"stored_offset", []string{"bigint"}, "bigint NOT NULL DEFAULT -1 COMMENT 'queue offset of the acknowledged send; -1: not recorded'", 0},
	{"stored_commit_offset", []string{"bigint"}, "bigint NOT NULL DEFAULT -1 COMMENT 'commit log offset of the send (from the offset message id); -1: not recorded'", 0},
	{"stored_audit_time", []string{"bigint"}, "bigint NOT NULL DEFAULT 0 COMMENT 'epoch ms of the last audit that found the message at the broker; 0: none'", 0},
}

// storedBrokerWidth is the width of stored_broker in ASCII characters, StoredBrokerMax.
const storedBrokerWidth = "48"

// StoredBrokerMax is the longest broker name stored_broker holds; a longer name, or one
// not of printable ASCII, is not recorded (its rows are not audited).
const StoredBrokerMax = 48

// The audit columns' defaults, read as "not recorded" by every reader.
const (
	// StoredBrokerNone is stored_broker of a row whose position is not recorded.
	StoredBrokerNone = ""
	// StoredNone is stored_queue, stored_offset and stored_commit_offset not recorded.
	StoredNone = -1
	// AuditTimeNone is stored_audit_time of a row no audit found present.
	AuditTimeNone = 0
)

// legacyAuditColumns are the audit columns of earlier versions: NULLable, NULL until the
// write-back filled them, so that recording a position lengthened every sent row and InnoDB
// could not update it in place (twice the drain time, 16 times the redo). They are known by
// name and by the comment those versions gave them, so that a user's own column of the same
// name is never taken for one.
var legacyAuditColumns = []struct{ name, comment, copyTo string }{
	{"broker_name", "broker that acknowledged the send", "stored_broker"},
	{"queue_id", "queue of the acknowledged send", "stored_queue"},
	{"queue_offset", "queue offset of the acknowledged send", "stored_offset"},
	{"offset_msg_id", "broker offset message id of the send", "stored_commit_offset"},
	{"audited_time", "epoch ms of the last audit that found the message at the broker", "stored_audit_time"},
}

// MissingAuditColumn is the Problem kind of an absent audit column.
const MissingAuditColumn = "missing audit column"

// CostlyAuditColumn is the Problem kind of an audit column of the earlier, NULLable kind:
// the relay records no position in it, and Plan copies its values into the fixed-width
// columns and drops it.
const CostlyAuditColumn = "costly audit column"

// AuditColumns lists the names of the columns that record where the broker stored a
// message (see HasAuditColumns).
func AuditColumns() []string {
	out := make([]string, len(auditColumns))
	for i, c := range auditColumns {
		out[i] = c.name
	}
	return out
}

// checkAudit reports each audit column table lacks, each of a wrong type, and each column
// of the earlier, costly kind it still has.
func checkAudit(found map[string]columnInfo) []Problem {
	var out []Problem
	for _, c := range auditColumns {
		got, ok := found[c.name]
		switch {
		case !ok:
			out = append(out, Problem{Kind: MissingAuditColumn, Object: c.name, Want: c.def})
		case !contains(c.types, got.dataType) || got.nullable || got.charset.Valid && got.charset.String != "ascii" && got.charset.String != "latin1":
			out = append(out, Problem{Kind: "wrong type", Object: c.name, Want: c.def, Got: got.columnType + nullNote(got)})
		}
	}
	for _, name := range legacyPresent(found) {
		out = append(out, Problem{Kind: CostlyAuditColumn, Object: name,
			Want: "dropped, its values copied to the fixed-width audit columns", Got: found[name].columnType + nullNote(found[name])})
	}
	return out
}

func nullNote(ci columnInfo) string {
	if ci.nullable {
		return " NULL"
	}
	return " NOT NULL"
}

// legacyPresent returns the names of the earlier, costly audit columns found in the table.
func legacyPresent(found map[string]columnInfo) []string {
	var out []string
	for _, c := range legacyAuditColumns {
		if ci, ok := found[c.name]; ok && ci.nullable && ci.comment == c.comment {
			out = append(out, c.name)
		}
	}
	return out
}

// auditStep returns the ALTER adding the audit columns names: ALGORITHM=INSTANT, which
// Apply retries as ALGORITHM=INPLACE, LOCK=NONE on a server that cannot add them instantly.
func auditStep(table string, names []string) Step {
	adds := make([]string, len(names))
	for i, n := range names {
		for _, c := range auditColumns {
			if c.name == n {
				adds[i] = fmt.Sprintf("ADD COLUMN %s %s", QuoteIdent(n), c.def)
			}
		}
	}
	alter := strings.Join(adds, ", ")
	return Step{SQL: fmt.Sprintf("ALTER TABLE %s %s, ALGORITHM=INSTANT", QuoteIdent(table), alter), Alter: alter, Online: true, Instant: true}
}

// legacySteps returns the steps that retire the earlier, costly audit columns names (run
// once the fixed-width ones exist): a backfill copying every recorded position into them
// (a position that does not fit, such as a broker name over StoredBrokerMax characters,
// stays not recorded), in primary key ranges, then one online ALTER dropping the old
// columns. The ALTER rebuilds the table (ALGORITHM=INPLACE, LOCK=NONE): writers go on, and
// afterwards every row carries the fixed-width columns in its record, so that the
// write-back and the audit update it in place.
func legacySteps(table string, names []string) []Step {
	q := QuoteIdent(table)
	var steps []Step
	if len(names) == len(legacyAuditColumns) {
		steps = append(steps, Step{
			SQL: "UPDATE " + q + " SET `stored_broker` = `broker_name`, `stored_queue` = `queue_id`, `stored_offset` = `queue_offset`, " +
				"`stored_commit_offset` = IF(`offset_msg_id` REGEXP '^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$', CAST(CONV(RIGHT(`offset_msg_id`, 16), 16, 10) AS SIGNED), -1), " +
				"`stored_audit_time` = COALESCE(`audited_time`, 0), `update_time` = `update_time` " +
				"WHERE (`stored_broker` = '' AND `broker_name` REGEXP '^[!-~]([ -~]{0," + fmt.Sprint(StoredBrokerMax-2) + "}[!-~])?$' " +
				"AND `queue_id` BETWEEN 0 AND 2147483647 AND `queue_offset` >= 0)",
			Online: true, Backfill: true,
			Note: "copy of the positions recorded in the old NULLable audit columns into the fixed-width ones",
		})
	}
	drops := make([]string, len(names))
	for i, n := range names {
		drops[i] = "DROP COLUMN " + QuoteIdent(n)
	}
	alter := strings.Join(drops, ", ")
	return append(steps, Step{
		// FORCE: without it MariaDB 10.4+ drops the columns instantly, and an instantly
		// altered table is never updated in place (measured: 17 times the redo per row).
		SQL: fmt.Sprintf("ALTER TABLE %s %s, FORCE, %s", q, alter, onlineClause), Alter: alter, Online: true,
		Note: "drops the old NULLable audit columns and REBUILDS the table online (writers go on; it takes about as long as copying the table " +
			"and needs its size in free disk): afterwards every row holds the fixed-width audit columns, and recording a position updates it in place",
	})
}

// HasAuditColumns reports whether table has every audit column of a usable type: only then
// does the relay record where messages were stored, and the auditor check them. A table
// with only the earlier, costly columns has none (see CostlyAuditColumn).
func HasAuditColumns(ctx context.Context, db *sql.DB, table string) (bool, error) {
	if err := ValidateIdent(table); err != nil {
		return false, err
	}
	found, err := readColumns(ctx, db, table)
	if err != nil {
		return false, err
	}
	if len(found) == 0 {
		return false, nil
	}
	for _, p := range checkAudit(found) {
		if p.Kind != CostlyAuditColumn {
			return false, nil
		}
	}
	return true, nil
}
