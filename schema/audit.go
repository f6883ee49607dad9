// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// auditColumns record where the broker stored each acknowledged message and when the
// auditor last found it there. They are NULLable and optional: a table without them is
// relayed as before, with nothing recorded and the audit off; Check reports them as
// "missing audit column" (not fatal) and Plan adds them online, instantly where the server
// can.
var auditColumns = []column{
	{"broker_name", []string{"varchar"}, "varchar(128) NULL DEFAULT NULL COMMENT 'broker that acknowledged the send'", 0},
	{"queue_id", []string{"int", "bigint", "smallint"}, "int NULL DEFAULT NULL COMMENT 'queue of the acknowledged send'", 0},
	{"queue_offset", []string{"bigint"}, "bigint NULL DEFAULT NULL COMMENT 'queue offset of the acknowledged send'", 0},
	{"offset_msg_id", []string{"varchar"}, "varchar(64) NULL DEFAULT NULL COMMENT 'broker offset message id of the send'", 0},
	{"audited_time", []string{"bigint"}, "bigint NULL DEFAULT NULL COMMENT 'epoch ms of the last audit that found the message at the broker'", 0},
}

// MissingAuditColumn is the Problem kind of an absent audit column.
const MissingAuditColumn = "missing audit column"

// AuditColumns lists the names of the columns that record where the broker stored a
// message (see HasAuditColumns).
func AuditColumns() []string {
	out := make([]string, len(auditColumns))
	for i, c := range auditColumns {
		out[i] = c.name
	}
	return out
}

// checkAudit reports each audit column table lacks, and each of a wrong type.
func checkAudit(found map[string]columnInfo) []Problem {
	var out []Problem
	for _, c := range auditColumns {
		got, ok := found[c.name]
		switch {
		case !ok:
			out = append(out, Problem{Kind: MissingAuditColumn, Object: c.name, Want: c.def})
		case !contains(c.types, got.dataType):
			out = append(out, Problem{Kind: "wrong type", Object: c.name, Want: strings.Join(c.types, " or "), Got: got.dataType})
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

// HasAuditColumns reports whether table has every audit column of a usable type: only then
// does the relay record where messages were stored, and the auditor check them.
func HasAuditColumns(ctx context.Context, db *sql.DB, table string) (bool, error) {
	if err := ValidateIdent(table); err != nil {
		return false, err
	}
	found, err := readColumns(ctx, db, table)
	if err != nil {
		return false, err
	}
	return len(found) > 0 && len(checkAudit(found)) == 0, nil
}
