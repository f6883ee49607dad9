// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"slices"
	"strings"
)

// idVal is one row's value of a column the write-back sets per row.
type idVal struct {
	id int64
	v  any
}

// idTree writes to b the expression giving each row of rows (sorted by id) its value v:
// a balanced tree of IF(id < pivot, …, …), so that the server compares each row's id about
// log2(len(rows)) times, where CASE id WHEN … compares it with half the list on average
// (a statement of 500 rows: 9 comparisons instead of 250, per row and column). A run of
// rows sharing a value, or whose int64 value is id plus one same difference (consecutive
// offsets of consecutive rows), is one leaf. The arguments are appended to args in the
// order of their placeholders.
func idTree(b *strings.Builder, args []any, rows []idVal) []any {
	if v, ok := sameValue(rows); ok {
		b.WriteString("?")
		return append(args, v)
	}
	if d, ok := sameDelta(rows); ok {
		b.WriteString("id + ?")
		return append(args, d)
	}
	mid := len(rows) / 2
	b.WriteString("IF(id < ?, ")
	args = idTree(b, append(args, rows[mid].id), rows[:mid])
	b.WriteString(", ")
	args = idTree(b, args, rows[mid:])
	b.WriteString(")")
	return args
}

func sameValue(rows []idVal) (any, bool) {
	for _, r := range rows[1:] {
		if r.v != rows[0].v {
			return nil, false
		}
	}
	return rows[0].v, true
}

func sameDelta(rows []idVal) (int64, bool) {
	first, ok := rows[0].v.(int64)
	if !ok || len(rows) < 2 {
		return 0, false
	}
	d := first - rows[0].id
	for _, r := range rows[1:] {
		if v, ok := r.v.(int64); !ok || v-r.id != d {
			return 0, false
		}
	}
	return d, true
}

// sortedByID returns the rows ids with their values vals, sorted by id.
func sortedByID(ids []int64, vals []any) []idVal {
	rows := make([]idVal, len(ids))
	for i, id := range ids {
		rows[i] = idVal{id, vals[i]}
	}
	slices.SortFunc(rows, func(a, b idVal) int {
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	return rows
}
