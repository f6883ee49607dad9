// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"crypto/sha256"
	"database/sql"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"
)

//go:embed stored_table.sql
var storedLogDDL string

// storedLogSuffix names an outbox table's stored-position journal: local_message's is
// local_message_stored.
const storedLogSuffix = "_stored"

// StoredLogTable returns the name of the stored-position journal of the outbox table:
// table + "_stored", or, when that would pass 64 characters, the table's first 47
// characters, "_", 8 hex digits of its SHA-256 and the suffix. table must pass
// ValidateIdent.
func StoredLogTable(table string) string {
	if len(table)+len(storedLogSuffix) <= 64 {
		return table + storedLogSuffix
	}
	sum := sha256.Sum256([]byte(table))
	return table[:64-len(storedLogSuffix)-9] + "_" + hex.EncodeToString(sum[:4]) + storedLogSuffix
}

// StoredLogDDL returns the CREATE TABLE IF NOT EXISTS statement of the outbox table's
// stored-position journal (StoredLogTable): where the broker stored each sent row, appended
// once per write-back rather than written into the outbox rows (docs/decisions.md, "Broker
// audit: positions in a journal").
func StoredLogDDL(table string) (string, error) {
	if err := ValidateIdent(table); err != nil {
		return "", err
	}
	return strings.ReplaceAll(storedLogDDL, "{{TABLE}}", QuoteIdent(StoredLogTable(table))), nil
}

// storedLogColumns are the journal's columns the relay reads and writes.
var storedLogColumns = []string{"seq", "settled_time", "first_id", "last_id", "row_count", "positions", "audited_time"}

// HasStoredLog reports whether the outbox table's stored-position journal exists with the
// columns the relay uses, so that the relay can record where the broker stored each row and
// the audit can read it.
func HasStoredLog(ctx context.Context, db *sql.DB, table string) (bool, error) {
	if err := ValidateIdent(table); err != nil {
		return false, err
	}
	found, err := readColumns(ctx, db, StoredLogTable(table))
	if err != nil {
		return false, err
	}
	for _, c := range storedLogColumns {
		if _, ok := found[c]; !ok {
			return false, nil
		}
	}
	return true, nil
}

// MissingStoredLog is the Problem kind of an outbox table whose stored-position journal
// does not exist: the relay runs, records no broker positions, and the broker audit stays
// off for the table until `outbox-relay migrate` creates the journal. Not fatal.
const MissingStoredLog = "missing stored-position journal"

// checkStoredLog reports the outbox table's journal when it is missing (Plan creates it),
// or when a table of its name lacks the journal's columns or hides them from this account
// (Plan refuses: it is not ours to alter; Got says why).
func checkStoredLog(ctx context.Context, db *sql.DB, table string) ([]Problem, error) {
	name := StoredLogTable(table)
	found, err := readColumns(ctx, db, name)
	if err != nil {
		return nil, err
	}
	want := "the broker audit stays off for this table until `outbox-relay migrate` creates it"
	if len(found) == 0 {
		// A journal this account cannot see must not stop the relay: report it, not fatal.
		if err := columnsHidden(ctx, db, name); errors.Is(err, ErrColumnsHidden) {
			return []Problem{{Kind: MissingStoredLog, Object: name, Want: want,
				Got: "a table whose columns are hidden from this account: grant it SELECT, INSERT, UPDATE and DELETE on the table"}}, nil
		} else if err != nil {
			return nil, err
		}
		return []Problem{{Kind: MissingStoredLog, Object: name, Want: want}}, nil
	}
	var lacks []string
	for _, c := range storedLogColumns {
		if _, ok := found[c]; !ok {
			lacks = append(lacks, c)
		}
	}
	if len(lacks) > 0 {
		return []Problem{{Kind: MissingStoredLog, Object: name, Want: want,
			Got: "a table of that name without the column(s) " + strings.Join(lacks, ", ") + ": rename or drop it"}}, nil
	}
	return nil, nil
}

// storedLogStep is the CREATE TABLE IF NOT EXISTS of the outbox table's journal: a new
// table, which locks nothing of the outbox table, so it is online.
func storedLogStep(table string) Step {
	ddl, _ := StoredLogDDL(table)
	return Step{SQL: strings.TrimSpace(ddl), Online: true,
		Note: "the stored-position journal: where the broker stored each sent row, for the broker audit (a new table; nothing of the outbox table is locked)"}
}
