// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// PartitionColumn is the generated column that splits a table's rows into relay.partitions
// partitions: CRC32 of the row's sharding_key (its msg_id when the key is empty) modulo the
// number of partitions. It is VIRTUAL, so adding or dropping it rewrites no row, and indexed
// with status and next_retry_time, so each partition's scan stays on an index.
const PartitionColumn = "relay_partition"

// partitionIndex is the index each partition's scan uses.
var partitionIndex = index{"idx_partition_status_retry", false, []string{PartitionColumn, "status", "next_retry_time"}}

// MaxPartitions bounds relay.partitions.
const MaxPartitions = 1024

// partitionDef is the column definition for p partitions. The empty sharding key falls back
// to msg_id, not id: MariaDB and MySQL refuse an indexed generated column over an
// AUTO_INCREMENT column, whose value is not known when the index entry is computed.
func partitionDef(p int) string {
	return fmt.Sprintf("smallint unsigned AS (CRC32(IF(`sharding_key` = '', `msg_id`, `sharding_key`)) %% %d) VIRTUAL "+
		"COMMENT 'outbox-relay: relay.partitions = %d'", p, p)
}

// partitionExpr matches the column's expression as servers report it (MariaDB writes
// "crc32(if(`sharding_key` = ”,`msg_id`,`sharding_key`)) MOD 8", MySQL "(crc32(...) % 8)").
var partitionExpr = regexp.MustCompile("(?i)^\\(?crc32\\(if\\(\\(?`sharding_key` = (_[a-z0-9]+)?'?'\\)?,\\s*`msg_id`,\\s*`sharding_key`\\)\\)\\s*(%|mod)\\s*(\\d+)\\)?$")

// Partitions returns the number of partitions table's PartitionColumn splits it into, or 1
// when the table has no such column. A column of that name with another definition is an
// error: it was not made by migrate.
func Partitions(ctx context.Context, db *sql.DB, table string) (int, error) {
	var expr sql.NullString
	err := db.QueryRowContext(ctx, `SELECT GENERATION_EXPRESSION FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, table, PartitionColumn).Scan(&expr)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("read the partition column of %s: %w", table, err)
	}
	m := partitionExpr.FindStringSubmatch(strings.TrimSpace(expr.String))
	if m == nil {
		return 0, fmt.Errorf("table %s: column %s is not outbox-relay's partition column (its expression is %q); rename it",
			table, PartitionColumn, expr.String)
	}
	n, err := strconv.Atoi(m[3])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("table %s: column %s splits rows into %q partitions", table, PartitionColumn, m[3])
	}
	return n, nil
}

// partitionState is what a table has of the partition column and its index.
type partitionState struct {
	got   int  // partitions of the column, 1 without it
	index bool // the partition index exists
}

// checkPartitions returns the differences between table's partition column and index and
// those of want partitions (1: no column), and what the table has.
func checkPartitions(ctx context.Context, db *sql.DB, table string, want int, have map[string]bool) ([]Problem, partitionState, error) {
	var st partitionState
	var err error
	if st.got, err = Partitions(ctx, db, table); err != nil {
		return nil, st, err
	}
	_, st.index = have[strings.Join(partitionIndex.columns, ",")]
	var problems []Problem
	switch {
	case st.got == want:
	case st.got == 1:
		problems = append(problems, Problem{Kind: "missing column", Object: PartitionColumn, Want: partitionDef(want)})
	default:
		problems = append(problems, Problem{Kind: "wrong partitions", Object: PartitionColumn,
			Want: fmt.Sprintf("%d partitions (relay.partitions)", want), Got: fmt.Sprintf("%d partitions", st.got)})
	}
	if want > 1 && !st.index {
		problems = append(problems, Problem{Kind: "missing index", Object: partitionIndex.name,
			Want: "(" + strings.Join(partitionIndex.columns, ",") + ")"})
	}
	return problems, st, nil
}

// partitionSteps returns the online statements that give table want partitions: adding a
// VIRTUAL column is instant and its index is built while writes go on; InnoDB cannot add a
// virtual column and do anything else in one online ALTER, hence one statement each.
// Changing the number of partitions drops the column and its index and adds them again.
func partitionSteps(table string, want int, st partitionState) []Step {
	var clauses []string
	index := st.index
	if st.got != want {
		if st.got > 1 {
			if index {
				clauses = append(clauses, "DROP INDEX "+QuoteIdent(partitionIndex.name))
				index = false
			}
			clauses = append(clauses, "DROP COLUMN "+QuoteIdent(PartitionColumn))
		}
		if want > 1 {
			clauses = append(clauses, "ADD COLUMN "+QuoteIdent(PartitionColumn)+" "+partitionDef(want))
		}
	}
	if want > 1 && !index {
		clauses = append(clauses, "ADD INDEX "+QuoteIdent(partitionIndex.name)+" ("+quoteAll(partitionIndex.columns)+")")
	}
	var steps []Step
	for _, c := range clauses {
		steps = append(steps, Step{SQL: fmt.Sprintf("ALTER TABLE %s %s, %s", QuoteIdent(table), c, onlineClause), Alter: c, Online: true})
	}
	return steps
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = QuoteIdent(n)
	}
	return strings.Join(q, ", ")
}
