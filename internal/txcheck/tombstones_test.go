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
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	n, err := PurgeTombstones(ctx, db.DB, "local_message", TombstoneRetention)
	if err != nil || n != 2 {
		t.Fatalf("purged %d tombstones (%v), want the 2 old ones", n, err)
	}
	var left []string
	rows, err := db.QueryContext(ctx, "SELECT msg_id FROM local_message ORDER BY id")
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
