// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// A seed-002 relay skips a row whose retry_count passed its max_retry_count and leaves it at
// status 1 for good: it has given up on it, and so has everyone since. outbox-relay never
// leaves a row in that state (such a row goes dead in the same write), so these rows can only
// come from the relay a table is adopted from. Sent as they are, months-old messages would
// reach consumers within a second of the first start; migrate parks them dead instead, where
// `outbox-relay dead list` shows them and `requeue` sends the ones that are still wanted.
const (
	givenUpWhere = "status IN (0, 1) AND " + RetryCountSQL + " > " + MaxRetrySQL + " AND " + NotDeletedSQL

	sqlGivenUpCount = "SELECT COUNT(*) FROM {T} WHERE " + givenUpWhere
	sqlGivenUpList  = "SELECT id, COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, ''), " + RetryCountSQL + ", " + MaxRetrySQL + ", create_time FROM {T} WHERE " +
		givenUpWhere + " ORDER BY id LIMIT ?"
	// GivenUpReason is the fail_reason migrate writes on the rows it parks.
	GivenUpReason = "given up by the previous relay (retry_count > max_retry_count, left at status 1): " +
		"parked dead by outbox-relay migrate; requeue to send"
	sqlParkGivenUp = "UPDATE {T} SET status = 3, next_retry_time = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), fail_reason = '" + GivenUpReason + "' WHERE " + givenUpWhere
)

// GivenUpRow is a row the previous relay gave up on (see GivenUp).
type GivenUpRow struct {
	ID                        int64
	MsgID, Topic, Tag         string
	RetryCount, MaxRetryCount int
	Created                   string
}

// GivenUp returns how many rows of table a seed-002 relay gave up on (status 0 or 1 with
// retry_count > max_retry_count, not deleted) and the first limit of them in id order.
// table must be an outbox table that has the seed-002 columns.
func GivenUp(ctx context.Context, db *sql.DB, table string, limit int) (int, []GivenUpRow, error) {
	if err := ValidateIdent(table); err != nil {
		return 0, nil, err
	}
	var n int
	if err := db.QueryRowContext(ctx, givenUpSQL(sqlGivenUpCount, table)).Scan(&n); err != nil {
		return 0, nil, fmt.Errorf("count rows given up on in %s: %w", table, err)
	}
	if n == 0 || limit <= 0 {
		return n, nil, nil
	}
	rows, err := db.QueryContext(ctx, givenUpSQL(sqlGivenUpList, table), limit)
	if err != nil {
		return 0, nil, fmt.Errorf("list rows given up on in %s: %w", table, err)
	}
	defer rows.Close()
	var out []GivenUpRow
	for rows.Next() {
		var r GivenUpRow
		if err := rows.Scan(&r.ID, &r.MsgID, &r.Topic, &r.Tag, &r.RetryCount, &r.MaxRetryCount, &r.Created); err != nil {
			return 0, nil, fmt.Errorf("list rows given up on in %s: %w", table, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("list rows given up on in %s: %w", table, err)
	}
	return n, out, nil
}

// ParkGivenUpSQL returns the UPDATE that parks the rows GivenUp finds as dead (status 3, with
// GivenUpReason), for a DBA or a migration tool.
func ParkGivenUpSQL(table string) (string, error) {
	if err := ValidateIdent(table); err != nil {
		return "", err
	}
	return givenUpSQL(sqlParkGivenUp, table), nil
}

// ParkGivenUp runs ParkGivenUpSQL and returns the number of rows parked. The statement is
// guarded by the state it expects, so running it again, or beside a relay, parks nothing else.
func ParkGivenUp(ctx context.Context, db *sql.DB, table string) (int64, error) {
	q, err := ParkGivenUpSQL(table)
	if err != nil {
		return 0, err
	}
	res, err := db.ExecContext(ctx, q)
	if err != nil {
		return 0, fmt.Errorf("park rows given up on in %s: %w", table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("park rows given up on in %s: %w", table, err)
	}
	return n, nil
}

func givenUpSQL(q, table string) string { return strings.ReplaceAll(q, "{T}", QuoteIdent(table)) }
