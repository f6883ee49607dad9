// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Cursor is a position in the dead rows of several tables, which are listed table by table
// (in the configured order), oldest id first within a table. The zero Cursor is the start.
type Cursor struct {
	// Database is the configured name of the database of the last row seen, when several
	// databases are listed; "" otherwise.
	Database string
	// Table is the table of the last row seen; "" is the start of the first table.
	Table string
	// ID is the id of the last row seen in Table.
	ID int64
}

// String returns the cursor as TABLE:ID, or DATABASE/TABLE:ID with a database, the form
// ParseCursor reads.
func (c Cursor) String() string {
	if c.Table == "" {
		return ""
	}
	s := c.Table + ":" + strconv.FormatInt(c.ID, 10)
	if c.Database != "" {
		s = c.Database + "/" + s
	}
	return s
}

// ParseCursor reads a cursor written as TABLE:ID or DATABASE/TABLE:ID (the form printed by
// dead list as the next page); "" is the start.
func ParseCursor(s string) (Cursor, error) {
	if s == "" {
		return Cursor{}, nil
	}
	var c Cursor
	rest := s
	if db, after, ok := strings.Cut(s, "/"); ok {
		c.Database, rest = db, after
	}
	table, id, ok := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(id, 10, 64)
	if !ok || table == "" || err != nil || n < 0 || (strings.Contains(s, "/") && c.Database == "") {
		return Cursor{}, fmt.Errorf("cursor %q: want TABLE:ID or DATABASE/TABLE:ID, e.g. local_message:1234", s)
	}
	c.Table, c.ID = table, n
	return c, nil
}

// DeadRow is a dead message with the table it lives in.
type DeadRow struct {
	// DatabaseName is the configured name of the table's database, filled in by the caller
	// when several databases are listed.
	DatabaseName string `json:"database_name,omitempty"`
	Table        string `json:"table"`
	DeadMessage
}

// DeadPage lists up to limit dead rows matching f across tables, in table order then id
// order, starting after the cursor. next is the cursor of the following page, or nil when
// there is none. A cursor naming a table not in tables is an error: rows would be skipped.
func DeadPage(ctx context.Context, db *sql.DB, tables []string, f Filter, after Cursor, limit int) (rows []DeadRow, next *Cursor, err error) {
	if limit <= 0 {
		limit = DefaultListLimit
	}
	start := 0
	if after.Table != "" {
		start = slices.Index(tables, after.Table)
		if start < 0 {
			return nil, nil, fmt.Errorf("cursor %s names table %s, which is not configured (tables: %s)", after, after.Table, strings.Join(tables, ", "))
		}
	}
	rows = []DeadRow{}
	for i := start; i < len(tables); i++ {
		var afterID int64
		if i == start {
			afterID = after.ID
		}
		// One row more than needed tells whether a next page exists.
		ms, err := DeadList(ctx, db, tables[i], f, afterID, limit-len(rows)+1)
		if err != nil {
			return nil, nil, err
		}
		for _, m := range ms {
			if len(rows) == limit {
				last := rows[len(rows)-1]
				return rows, &Cursor{Database: after.Database, Table: last.Table, ID: last.ID}, nil
			}
			rows = append(rows, DeadRow{Table: tables[i], DeadMessage: m})
		}
	}
	return rows, nil, nil
}
