// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"slices"
	"testing"
	"time"
)

// TestNullsOfAnAdoptedTable: on a table whose contract columns allow NULL, `status` counts a
// NULL or out-of-range status as unknown (by value) instead of failing, and counts a row of
// NULL next_retry_time and is_deleted as pending and due since its creation; the dead list,
// the dead row's count, requeue and purge read their rows' NULLs as the contract's defaults.
func TestNullsOfAnAdoptedTable(t *testing.T) {
	b := setup(t)
	for _, stmt := range []string{
		"ALTER TABLE " + table + " MODIFY is_deleted tinyint NULL DEFAULT NULL, MODIFY status tinyint NULL DEFAULT NULL," +
			" MODIFY retry_count int NULL DEFAULT NULL, MODIFY next_retry_time bigint NULL DEFAULT NULL," +
			" MODIFY max_retry_count int NULL DEFAULT NULL, MODIFY msg_keys varchar(512) NULL DEFAULT NULL," +
			" MODIFY sharding_key varchar(128) NULL DEFAULT NULL, MODIFY sent_time bigint NULL DEFAULT NULL, MODIFY tag varchar(200) NULL DEFAULT NULL",
		"INSERT INTO " + table + " (msg_id, topic, content, status, next_retry_time, is_deleted, retry_count, create_time) VALUES" +
			" ('pending', 'orders', '{}', 0, 0, 0, 0, NOW())," +
			" ('null-next', 'orders', '{}', 0, NULL, NULL, NULL, NOW() - INTERVAL 1 HOUR)," +
			" ('null-status-1', 'orders', '{}', NULL, 0, 0, 0, NOW()), ('null-status-2', 'orders', '{}', NULL, 0, 0, 0, NOW())," +
			" ('status-7', 'orders', '{}', 7, 0, 0, 0, NOW()), ('status-minus-1', 'orders', '{}', -1, 0, 0, 0, NOW())",
		"INSERT INTO " + table + " (msg_id, topic, content, status, fail_reason, next_retry_time, update_time) VALUES" +
			" ('dead-nulls', 'orders', '{}', 3, 'gone', 1, NOW() - INTERVAL 1 DAY)," +
			" ('sent-old', 'orders', '{}', 2, NULL, 1, NOW() - INTERVAL 1 DAY)",
	} {
		if _, err := b.db.ExecContext(b.ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Status(b.ctx, b.db, table, time.Now())
	if err != nil {
		t.Fatalf("status of a table with NULL statuses: %v", err)
	}
	want := []StatusValue{{"NULL", 2}, {"-1", 1}, {"7", 1}}
	if r.Unknown != 4 || len(r.UnknownByValue) != 3 || !slices.Contains(r.UnknownByValue, want[0]) ||
		!slices.Contains(r.UnknownByValue, want[1]) || !slices.Contains(r.UnknownByValue, want[2]) {
		t.Errorf("unknown %d by value %v; want 4: %v", r.Unknown, r.UnknownByValue, want)
	}
	if r.Pending != 2 || r.Due != 2 || r.Dead != 1 || r.Sent != 1 || r.Deleted != 0 {
		t.Errorf("pending %d due %d dead %d sent %d deleted %d; want 2 2 1 1 0", r.Pending, r.Due, r.Dead, r.Sent, r.Deleted)
	}
	if r.OldestDueAge < 59*time.Minute {
		t.Errorf("oldest due %s; want about 1h (the row of NULL next_retry_time, due since its creation)", r.OldestDueAge)
	}
	if n, err := CountUnknown(b.ctx, b.db, table); err != nil || n != 4 {
		t.Errorf("CountUnknown: %d, %v; want 4", n, err)
	}

	dead, err := DeadList(b.ctx, b.db, table, Filter{}, 0, 0)
	if err != nil || len(dead) != 1 || dead[0].MsgID != "dead-nulls" || dead[0].RetryCount != 0 || dead[0].MaxRetryCount != 3 {
		t.Fatalf("dead list: %+v, %v; want dead-nulls with 0/3 retries", dead, err)
	}
	if _, err := DeadBody(b.ctx, b.db, table, dead[0].ID, 100); err != nil {
		t.Errorf("dead row's body: %v", err)
	}
	res, err := Requeue(b.ctx, b.db, table, Filter{MsgIDs: []string{"dead-nulls", "null-status-1"}})
	if err != nil || len(res.Requeued) != 1 || res.Skipped["null-status-1"] == "" {
		t.Errorf("requeue: %+v, %v; want dead-nulls requeued, null-status-1 left alone", res, err)
	}
	purged, err := Purge(b.ctx, b.db, table, PurgeOptions{OlderThan: time.Hour})
	if err != nil || purged.Deleted != 1 {
		t.Errorf("purge of a sent row of NULL sent_time a day old: %+v, %v; want 1 deleted", purged, err)
	}
}
