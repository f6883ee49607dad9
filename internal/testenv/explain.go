// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"database/sql"
	"testing"
)

// Explain runs EXPLAIN q with args and returns the plan's rows, each as column -> value, for
// tests and benchmarks that check or log which index a statement uses.
func Explain(tb testing.TB, db *sql.DB, q string, args ...any) []map[string]string {
	tb.Helper()
	return Plan(tb, db, "EXPLAIN", q, args...)
}

// Plan runs q prefixed with how (EXPLAIN, or MariaDB's ANALYZE, which also runs it) and
// returns the plan's rows, each as column -> value; a NULL reads as "NULL".
func Plan(tb testing.TB, db *sql.DB, how, q string, args ...any) []map[string]string {
	tb.Helper()
	rows, err := db.Query(how+" "+q, args...)
	if err != nil {
		tb.Fatalf("%s %s: %v", how, q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		tb.Fatal(err)
	}
	var plans []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			tb.Fatal(err)
		}
		plan := map[string]string{}
		for i, c := range cols {
			plan[c] = vals[i].String
			if !vals[i].Valid {
				plan[c] = "NULL"
			}
		}
		plans = append(plans, plan)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return plans
}
