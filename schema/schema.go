// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
)

//go:embed outbox_table.sql
var outboxDDL string

// InsertSQL is the minimal plain-SQL insert of an outbox row, for services in any language.
// Run it inside the transaction that writes the business rows; every other column has a
// default. Replace local_message with the configured table name.
const InsertSQL = "INSERT INTO local_message (msg_id, topic, tag, content, msg_keys) VALUES (?, ?, ?, ?, ?)"

// DDL returns the CREATE TABLE IF NOT EXISTS statement for an outbox table.
func DDL(table string) (string, error) {
	if err := ValidateIdent(table); err != nil {
		return "", err
	}
	return strings.ReplaceAll(outboxDDL, "{{TABLE}}", QuoteIdent(table)), nil
}

// column is one column the relay relies on: the types it accepts, the definition used to
// add it to an older table and, for the writers' text columns, the width the contract
// promises them.
type column struct {
	name  string
	types []string // acceptable DATA_TYPE values from information_schema
	def   string   // ADD COLUMN definition
	// width is the least CHARACTER_MAXIMUM_LENGTH (characters for varchar, bytes for text
	// types) that holds what the Writer accepts; 0: not checked.
	width int64
}

// Widths the contract promises writers (outbox.MaxMsgIDLen, MaxTagLen, MaxKeysLen,
// MaxShardingKeyLen) and the body limit a mediumtext content holds (16 MiB, over the 4 MiB
// default of relay.max_body_bytes; a text column holds 64 KiB).
const (
	mediumtextBytes = 1<<24 - 1
)

// columns lists every column of the contract, in table order. Widening is accepted (a
// content of longtext, a bigint status), narrowing is reported.
var columns = []column{
	{"id", []string{"bigint"}, "bigint NOT NULL AUTO_INCREMENT", 0},
	{"create_time", []string{"datetime", "timestamp"}, "datetime NOT NULL DEFAULT CURRENT_TIMESTAMP", 0},
	{"update_time", []string{"datetime", "timestamp"}, "datetime NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP", 0},
	{"is_deleted", []string{"tinyint", "smallint", "int"}, "tinyint NOT NULL DEFAULT 0", 0},
	{"msg_id", []string{"varchar"}, "varchar(64) NOT NULL", 64},
	{"topic", []string{"varchar"}, "varchar(200) NOT NULL", 127},
	{"tag", []string{"varchar"}, "varchar(200) NOT NULL DEFAULT ''", 200},
	{"content", []string{"text", "mediumtext", "longtext"}, "mediumtext NOT NULL", mediumtextBytes},
	{"status", []string{"tinyint", "smallint", "int"}, "tinyint NOT NULL DEFAULT 0", 0},
	// fail_reason's width is not checked: the relay cuts reasons to it.
	{"fail_reason", []string{"varchar", "text"}, "varchar(1000) DEFAULT NULL", 0},
	{"retry_count", []string{"int", "bigint"}, "int NOT NULL DEFAULT 0", 0},
	{"next_retry_time", []string{"bigint"}, "bigint NOT NULL DEFAULT 0", 0},
	{"max_retry_count", []string{"int", "bigint"}, "int NOT NULL DEFAULT 3", 0},
	{"msg_keys", []string{"varchar", "text"}, "varchar(512) NOT NULL DEFAULT ''", 512},
	{"sharding_key", []string{"varchar"}, "varchar(128) NOT NULL DEFAULT ''", 128},
	{"properties", []string{"text", "mediumtext", "longtext", "json"}, "text DEFAULT NULL", 0},
	{"sent_time", []string{"bigint"}, "bigint NOT NULL DEFAULT 0", 0},
}

// index is an index the relay's queries rely on, matched by its column list, not its name.
type index struct {
	name    string
	unique  bool
	columns []string
}

var indexes = []index{
	{"uk_msg_id", true, []string{"msg_id"}},
	{"idx_status_retry", false, []string{"status", "next_retry_time"}},
	{"idx_topic_tag", false, []string{"topic", "tag"}},
	{"idx_sharding_id", false, []string{"sharding_key", "id"}},
}

// obsoleteIndexes are indexes earlier versions of the contract created and the relay no longer
// uses: each costs every write-back an index entry moved. Check reports one found under its
// own name and columns (a non-fatal "obsolete index"), and Plan drops it online. An index of
// the same columns under another name is the user's and is left alone.
var obsoleteIndexes = []index{
	// (status, update_time) served the purge and the dashboard's activity; both read the
	// (status, next_retry_time) index now, where a settled row's next_retry_time is the time
	// it was settled (docs/decisions.md, issue 21).
	{"idx_status_update", false, []string{"status", "update_time"}},
	// (sharding_key, status, id) served the ordered check's read of a key's unsent rows; the
	// check reads a key's nearest older rows on (sharding_key, id) now, which a send does
	// not move (docs/decisions.md, issue 21).
	{"idx_sharding_status", false, []string{"sharding_key", "status", "id"}},
}

// Problem is one way a table differs from the contract.
type Problem struct {
	// Kind is "missing table", "missing column", "wrong type", "not auto_increment",
	// "missing index", "not unique", "narrow column", "obsolete index", "nullable column",
	// or MissingStoredLog.
	Kind string
	// Object names the column or index concerned; empty for a missing table.
	Object string
	// Want and Got describe the expected and the found definition, where that applies.
	Want, Got string
}

// Fatal reports whether the relay cannot run on the table: every problem but a narrow
// column, which only limits what writers can insert (longer values are refused with error
// 1406, or cut silently when the server's sql_mode is not strict), an obsolete index, which
// only slows the write-back down, a missing stored-position journal, without which the
// relay records no broker positions and does not audit, and a nullable column, whose NULLs
// every statement reads as the contract says (see nulls.go).
func (p Problem) Fatal() bool {
	return p.Kind != "narrow column" && p.Kind != "obsolete index" && p.Kind != "nullable column" && p.Kind != MissingStoredLog
}

func (p Problem) String() string {
	s := p.Kind
	if p.Object != "" {
		s += " " + p.Object
	}
	switch {
	case p.Kind == MissingStoredLog && p.Got == "":
		s += " (" + p.Want + ")"
	case p.Want != "" || p.Got != "":
		s += fmt.Sprintf(" (want %s, got %s)", p.Want, p.Got)
	}
	return s
}

// Check compares table with the contract of an unpartitioned table (relay.partitions = 1)
// and returns every difference; an up-to-date table gives none. Only what the relay relies
// on is checked: extra columns and indexes are fine.
func Check(ctx context.Context, db *sql.DB, table string) ([]Problem, error) {
	return CheckPartitioned(ctx, db, table, 1)
}

// CheckPartitioned is Check for a table split into partitions partitions (relay.partitions):
// the table must also have PartitionColumn for that many partitions and its index, or,
// with 1, no such column.
func CheckPartitioned(ctx context.Context, db *sql.DB, table string, partitions int) ([]Problem, error) {
	problems, _, err := check(ctx, db, table, partitions)
	return problems, err
}

func check(ctx context.Context, db *sql.DB, table string, partitions int) ([]Problem, partitionState, error) {
	if err := ValidateIdent(table); err != nil {
		return nil, partitionState{}, err
	}
	if partitions < 1 || partitions > MaxPartitions {
		return nil, partitionState{}, fmt.Errorf("partitions: must be between 1 and %d, got %d", MaxPartitions, partitions)
	}
	found, err := readColumns(ctx, db, table)
	if err != nil {
		return nil, partitionState{}, err
	}
	if len(found) == 0 {
		if err := columnsHidden(ctx, db, table); err != nil {
			return nil, partitionState{}, err
		}
		return []Problem{{Kind: "missing table", Object: table}}, partitionState{got: 1}, nil
	}
	var problems []Problem
	for _, c := range columns {
		got, ok := found[c.name]
		switch {
		case !ok:
			problems = append(problems, Problem{Kind: "missing column", Object: c.name, Want: c.def})
		case !contains(c.types, got.dataType):
			problems = append(problems, Problem{Kind: "wrong type", Object: c.name, Want: strings.Join(c.types, " or "), Got: got.dataType})
		case c.name == "id" && !strings.Contains(got.extra, "auto_increment"):
			problems = append(problems, Problem{Kind: "not auto_increment", Object: "id", Want: "AUTO_INCREMENT", Got: got.columnType})
		case c.width > 0 && got.maxLen.Valid && got.maxLen.Int64 < c.width:
			problems = append(problems, Problem{Kind: "narrow column", Object: c.name, Want: widthOf(c), Got: got.columnType + widthNote(got.dataType, got.maxLen.Int64)})
		}
		if ok && contains(c.types, got.dataType) && got.nullable && c.backfilled() {
			problems = append(problems, Problem{Kind: "nullable column", Object: c.name, Want: "NOT NULL", Got: got.columnType + " NULL"})
		}
	}
	journal, err := checkStoredLog(ctx, db, table)
	if err != nil {
		return nil, partitionState{}, err
	}
	problems = append(problems, journal...)
	have, named, err := readIndexes(ctx, db, table)
	if err != nil {
		return nil, partitionState{}, err
	}
	for _, ix := range obsoleteIndexes {
		if key := strings.Join(ix.columns, ","); named[ix.name] == key {
			problems = append(problems, Problem{Kind: "obsolete index", Object: ix.name, Want: "no index", Got: "(" + key + ")"})
		}
	}
	for _, ix := range indexes {
		key := strings.Join(ix.columns, ",")
		unique, ok := have[key]
		switch {
		case !ok:
			problems = append(problems, Problem{Kind: "missing index", Object: ix.name, Want: "(" + key + ")"})
		case ix.unique && !unique:
			problems = append(problems, Problem{Kind: "not unique", Object: ix.name, Want: "UNIQUE (" + key + ")", Got: "non-unique"})
		}
	}
	more, st, err := checkPartitions(ctx, db, table, partitions, have)
	if err != nil {
		return nil, st, err
	}
	return append(problems, more...), st, nil
}

// Migrate creates table when it does not exist, or upgrades it in place: missing columns
// and indexes are added with their defaults and id is made AUTO_INCREMENT, so a table made
// with the original local_message DDL keeps all its rows. Running it on an up-to-date table
// changes nothing. A column of an incompatible type is reported, never altered. It runs
// every step of Plan, the blocking ones included (see Apply); on a live table, look at Plan
// first.
func Migrate(ctx context.Context, db *sql.DB, table string) error {
	return MigratePartitioned(ctx, db, table, 1)
}

// MigratePartitioned is Migrate for a table split into partitions partitions
// (relay.partitions; see PlanPartitioned).
func MigratePartitioned(ctx context.Context, db *sql.DB, table string, partitions int) error {
	steps, err := PlanPartitioned(ctx, db, table, partitions)
	if err != nil {
		return err
	}
	return Apply(ctx, db, table, steps, true)
}

type columnInfo struct {
	dataType, columnType, extra, comment string
	maxLen                               sql.NullInt64 // CHARACTER_MAXIMUM_LENGTH
	nullable                             bool          // IS_NULLABLE
	// deflt is COLUMN_DEFAULT; charset and collation are NULL for a column not of text.
	deflt, charset, collation sql.NullString
}

// widthOf describes the width column c needs.
func widthOf(c column) string {
	if c.name == "content" {
		return "mediumtext or longtext (bodies up to relay.max_body_bytes, 4 MiB by default)"
	}
	return fmt.Sprintf("at least %d characters", c.width)
}

// widthNote says how much a text type holds (its bytes); varchar types say it themselves.
func widthNote(dataType string, maxLen int64) string {
	if strings.HasSuffix(dataType, "text") {
		return fmt.Sprintf(": %d bytes at most", maxLen)
	}
	return ""
}

func readColumns(ctx context.Context, db *sql.DB, table string) (map[string]columnInfo, error) {
	rows, err := db.QueryContext(ctx, `SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, EXTRA, COLUMN_COMMENT, CHARACTER_MAXIMUM_LENGTH,
			IS_NULLABLE = 'YES', COLUMN_DEFAULT, CHARACTER_SET_NAME, COLLATION_NAME
		FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table)
	if err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]columnInfo{}
	for rows.Next() {
		var name string
		var ci columnInfo
		if err := rows.Scan(&name, &ci.dataType, &ci.columnType, &ci.extra, &ci.comment, &ci.maxLen,
			&ci.nullable, &ci.deflt, &ci.charset, &ci.collation); err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", table, err)
		}
		ci.dataType = strings.ToLower(ci.dataType)
		ci.extra = strings.ToLower(ci.extra)
		out[strings.ToLower(name)] = ci
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read columns of %s: %w", table, err)
	}
	return out, nil
}

// readIndexes returns the table's indexes keyed by their comma-joined column list, with
// whether each is unique, and each index's column list by its name.
func readIndexes(ctx context.Context, db *sql.DB, table string) (map[string]bool, map[string]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME
		FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
		ORDER BY INDEX_NAME, SEQ_IN_INDEX`, table)
	if err != nil {
		return nil, nil, fmt.Errorf("read indexes of %s: %w", table, err)
	}
	defer rows.Close()
	cols := map[string][]string{}
	uniq := map[string]bool{}
	var order []string
	for rows.Next() {
		var name, col string
		var nonUnique int
		if err := rows.Scan(&name, &nonUnique, &col); err != nil {
			return nil, nil, fmt.Errorf("read indexes of %s: %w", table, err)
		}
		if _, seen := cols[name]; !seen {
			order = append(order, name)
		}
		cols[name] = append(cols[name], strings.ToLower(col))
		uniq[name] = nonUnique == 0
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read indexes of %s: %w", table, err)
	}
	out := map[string]bool{}
	named := map[string]string{}
	for _, name := range order {
		key := strings.Join(cols[name], ",")
		out[key] = out[key] || uniq[name]
		named[name] = key
	}
	return out, named, nil
}

func indexByName(name string) index {
	for _, ix := range indexes {
		if ix.name == name {
			return ix
		}
	}
	panic("schema: unknown index " + name)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// indexByColumnsSQL finds a table's index by its columns, as Check does: its arguments are
// the table and the columns, lower-case and comma-separated in index order; it returns the
// first such index's name, or no row.
const indexByColumnsSQL = `SELECT INDEX_NAME FROM information_schema.STATISTICS
	WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?
	GROUP BY INDEX_NAME HAVING GROUP_CONCAT(LOWER(COLUMN_NAME) ORDER BY SEQ_IN_INDEX) = ?
	ORDER BY INDEX_NAME LIMIT 1`

// ScanIndex returns the name of table's (status, next_retry_time) index, the index of the
// relay's scan, of the purge and of the dashboard's activity, found by its columns as Check
// finds it (an adopted table may name it otherwise); "" when the table has none.
func ScanIndex(ctx context.Context, db *sql.DB, table string) (string, error) {
	return IndexByColumns(ctx, db, table, "status,next_retry_time")
}

// IndexByColumns returns the name of table's index on exactly cols (lower-case,
// comma-separated, in index order), found as Check finds it; "" when the table has none.
func IndexByColumns(ctx context.Context, db *sql.DB, table, cols string) (string, error) {
	var name string
	err := db.QueryRowContext(ctx, indexByColumnsSQL, table, cols).Scan(&name)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("find the (%s) index of %s: %w", cols, table, err)
	}
	return name, nil
}
