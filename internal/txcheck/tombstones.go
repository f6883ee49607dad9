// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/schema"
)

// TombstoneRetention is how long a tombstone (the dead, deleted row a fenced check inserts)
// keeps its msg_id: far longer than any writer's transaction stays open, after which the
// writer's insert it fences can no longer come. Older tombstones are purged, so that forged
// checks cannot grow the table (and the topics the dashboard counts) without end.
const TombstoneRetention = 24 * time.Hour

// tombstoneReasonPrefix begins every tombstone's fail_reason (decider.fence).
const tombstoneReasonPrefix = "fenced by a transactional check"

// tombstoneBatch bounds the tombstones one statement deletes.
const tombstoneBatch = 500

// PurgeTombstones deletes the tombstones of table last written more than olderThan ago (by
// the database's clock), in batches deleted by primary key, and returns how many it
// deleted. Dead rows of any other origin are never touched.
func PurgeTombstones(ctx context.Context, db *sql.DB, table string, olderThan time.Duration) (int64, error) {
	t := schema.QuoteIdent(table)
	// Not the primary key: walking ids would read the whole table's history to find the
	// dead rows; the status index's range of dead rows is read and sorted instead.
	sel := "SELECT id FROM " + t + " IGNORE INDEX (PRIMARY) WHERE status = 3 AND is_deleted = 1 AND fail_reason LIKE ? AND id > ?" +
		" AND update_time < NOW() - INTERVAL ? SECOND ORDER BY id LIMIT ?"
	var deleted, after int64
	for {
		ids, err := tombstoneIDs(ctx, db, sel, after, olderThan)
		if err != nil || len(ids) == 0 {
			return deleted, err
		}
		after = ids[len(ids)-1].(int64)
		del := "DELETE FROM " + t + " WHERE id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")" +
			" AND status = 3 AND is_deleted = 1 AND fail_reason LIKE ? AND update_time < NOW() - INTERVAL ? SECOND"
		res, err := db.ExecContext(ctx, del, append(ids, tombstoneReasonPrefix+"%", int64(olderThan.Seconds()))...)
		if err != nil {
			return deleted, fmt.Errorf("purge tombstones of %s: %w", table, err)
		}
		n, _ := res.RowsAffected()
		deleted += n
		if len(ids) < tombstoneBatch {
			return deleted, nil
		}
	}
}

// tombstoneIDs reads the next batch of old tombstones' ids after the id after.
func tombstoneIDs(ctx context.Context, db *sql.DB, sel string, after int64, olderThan time.Duration) ([]any, error) {
	rows, err := db.QueryContext(ctx, sel, tombstoneReasonPrefix+"%", after, int64(olderThan.Seconds()), tombstoneBatch)
	if err != nil {
		return nil, fmt.Errorf("find old tombstones: %w", err)
	}
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("find old tombstones: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
