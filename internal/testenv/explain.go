package testenv

import (
	"database/sql"
	"testing"
)

// Explain runs EXPLAIN q with args and returns the plan's rows, each as column -> value, for
// tests and benchmarks that check or log which index a statement uses.
func Explain(tb testing.TB, db *sql.DB, q string, args ...any) []map[string]string {
	tb.Helper()
	rows, err := db.Query("EXPLAIN "+q, args...)
	if err != nil {
		tb.Fatalf("EXPLAIN %s: %v", q, err)
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
		}
		plans = append(plans, plan)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return plans
}
