// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestOldTombstonesArePurged: tombstones older than the retention are deleted; a recent
// tombstone, an old dead row and an old discarded (deleted) dead row of another origin stay.
// The search reads the dead rows' range of the status index, not the table's history.
func TestOldTombstonesArePurged(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"INSERT INTO local_message (msg_id, topic, content, status, is_deleted, fail_reason, update_time) VALUES " +
			"('old-tomb-1', 'forged-1', '', 3, 1, 'fenced by a transactional check after 4 checks', NOW() - INTERVAL 2 DAY)," +
			"('old-tomb-2', 'forged-2', '', 3, 1, 'fenced by a transactional check after 5 checks', NOW() - INTERVAL 25 HOUR)," +
			"('new-tomb', 'forged-3', '', 3, 1, 'fenced by a transactional check after 4 checks', NOW())," +
			"('old-dead', 'orders', 'x', 3, 0, 'fenced by a transactional check after 4 checks', NOW() - INTERVAL 2 DAY)," +
			"('old-discarded', 'orders', 'x', 3, 1, 'refused by the broker', NOW() - INTERVAL 2 DAY)",
		// the table's history: sent rows, which the search must not walk
		"INSERT INTO local_message (msg_id, topic, content, status, update_time) " +
			"SELECT CONCAT('sent-', seq), 'orders', 'x', 2, NOW() - INTERVAL 3 DAY FROM seq_1_to_5000",
		"ANALYZE TABLE local_message",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	sel := "SELECT id FROM local_message IGNORE INDEX (PRIMARY) WHERE status = 3 AND is_deleted = 1 AND fail_reason LIKE ? AND id > ?" +
		" AND update_time < NOW() - INTERVAL ? SECOND ORDER BY id LIMIT ?"
	if plan := testenv.Explain(t, db.DB, sel, tombstoneReasonPrefix+"%", 0, 86400, 500); plan[0]["key"] != "idx_status_retry" {
		t.Errorf("the search for tombstones does not read the dead rows' range of the status index: %v", plan)
	}
	n, err := PurgeTombstones(ctx, db.DB, "local_message", TombstoneRetention)
	if err != nil || n != 2 {
		t.Fatalf("purged %d tombstones (%v), want the 2 old ones", n, err)
	}
	var left []string
	rows, err := db.QueryContext(ctx, "SELECT msg_id FROM local_message WHERE status = 3 ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	if want := "[new-tomb old-dead old-discarded]"; fmt.Sprint(left) != want {
		t.Errorf("rows left %v, want %s", left, want)
	}
}
