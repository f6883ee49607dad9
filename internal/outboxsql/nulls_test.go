// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestNullSafeStatementsKeepTheirPlans: on an adopted table with nullable state columns and
// a history of 60,000 sent rows behind 50 due ones (10 of them with a NULL next_retry_time),
// the page query's first page (the NULL phase) and its later pages are ranges of the
// (status, next_retry_time) index, in its order (no filesort), reading the due rows only;
// the NULL-safe write-back guard still reaches its rows by primary key.
func TestNullSafeStatementsKeepTheirPlans(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	seedTable(t, db.DB,
		"ALTER TABLE local_message MODIFY is_deleted tinyint NULL DEFAULT NULL, MODIFY retry_count int NULL DEFAULT NULL, MODIFY next_retry_time bigint NULL DEFAULT NULL",
		sentHistory,
		"INSERT INTO local_message (msg_id, topic, content, status, retry_count, next_retry_time, is_deleted) SELECT CONCAT('null-', seq), 'orders', '{}', 0, NULL, NULL, NULL FROM seq_1_to_10",
		"INSERT INTO local_message (msg_id, topic, content, status, next_retry_time) SELECT CONCAT('due-', seq), 'orders', '{}', 0, seq FROM seq_1_to_40",
		"ANALYZE TABLE local_message")
	s := testStore(db.DB)
	if err := s.ScanIndex(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	for _, c := range []Cursor{{Null: true, Next: -1 << 62, ID: -1 << 62}, {Next: 5, ID: 0}} {
		q, args := s.PageQuery(int(outbox.StatusPending), now, c, 500, 1<<20)
		for _, p := range testenv.Plan(t, db.DB, "ANALYZE", q, args...) {
			if p["key"] != "idx_status_retry" || p["type"] != "range" || strings.Contains(p["Extra"], "filesort") {
				t.Errorf("page query (cursor %+v) plan: %v; want a range of idx_status_retry in index order", c, p)
			}
			if n, err := strconv.ParseFloat(p["r_rows"], 64); err != nil || n > 50 {
				t.Errorf("page query (cursor %+v) read %s index entries, want at most the 50 due rows", c, p["r_rows"])
			}
		}
	}
	q := "UPDATE `local_message` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?" +
		" WHERE id IN (?, ?, ?) AND status IN (0, 1) AND " + schema.RetryCountSQL + " = ?"
	for _, p := range testenv.Explain(t, db.DB, q, now, now, 60001, 60002, 60003, 0) {
		if p["key"] != "PRIMARY" || p["type"] != "range" {
			t.Errorf("NULL-safe write-back plan: %v; want a range of the primary key", p)
		}
	}
}
