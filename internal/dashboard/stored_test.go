// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestTimelineShowsWhereStoredAndTheAudit: with the table's stored-position journal, a sent
// row's page names the broker, queue, offset and commit log offset its send was stored at
// and when the broker audit finished that send's entry; a row the audit found lost says so
// with the audit's reason, whether it waits or was sent again (the journal's entry of its
// earlier send does not count for the new one); a row whose send the journal does not hold,
// and a table without a journal, show the old story with no error.
func TestTimelineShowsWhereStoredAndTheAudit(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := b.db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	lost := "lost by broker broker-a after acknowledgement: queue 3 truncated below offset 42"
	exec("INSERT INTO `"+table+"` (id, msg_id, topic, content, status, fail_reason, sent_time, next_retry_time) VALUES"+
		" (1, 'present', 'orders', 'x', 2, NULL, 1800000000000, 1800000000000),"+
		" (2, 'resent', 'orders', 'x', 2, ?, 1800000100000, 1800000100000),"+
		" (3, 'waiting', 'orders', 'x', 1, ?, 0, 0),"+
		" (4, 'older', 'orders', 'x', 2, NULL, 1800000000000, 1800000000000)", lost, lost)
	ddl, err := schema.StoredLogDDL(table)
	if err != nil {
		t.Fatal(err)
	}
	exec(ddl)
	exec("DROP TABLE IF EXISTS `" + schema.StoredLogTable(otherTable) + "`")
	j, err := storedlog.Open(b.db.DB, table)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), []storedlog.Entry{
		{SettledMs: 1800000000000, Positions: []storedlog.Pos{{ID: 1, Broker: "broker-a", QueueID: 3, Offset: 42, CommitOffset: 43981}}},
		{SettledMs: 1799999000000, Positions: []storedlog.Pos{{ID: 2, Broker: "broker-a", QueueID: 3, Offset: 42, CommitOffset: -1}}}, // the lost send
		{SettledMs: 1800000100000, Positions: []storedlog.Pos{{ID: 2, Broker: "broker-b", QueueID: 0, Offset: 7, CommitOffset: -1}}},
	}); err != nil {
		t.Fatal(err)
	}
	exec("UPDATE `"+schema.StoredLogTable(table)+"` SET audited_time = 1800000090000 WHERE settled_time = ?", 1800000000000)
	exec("INSERT INTO `" + otherTable + "` (id, msg_id, topic, content, status, sent_time) VALUES (1, 'plain', 'payments', 'p', 2, 1800000000000)")

	row := func(tb string, id int) (string, RowAnswer) {
		t.Helper()
		var r RowAnswer
		if code, raw := b.do(t, "GET", fmt.Sprintf("/ui/api/row?table=%s&id=%d", tb, id), nil, "", &r); code != 200 {
			t.Fatalf("row %s/%d: %d %s", tb, id, code, raw)
		}
		var steps []string
		for _, e := range r.Timeline {
			steps = append(steps, e.Step)
		}
		return strings.Join(steps, " "), r
	}
	detail := func(r RowAnswer, step string) string {
		for _, e := range r.Timeline {
			if e.Step == step {
				return e.Detail
			}
		}
		return ""
	}

	steps, r := row(table, 1)
	if steps != "written sent stored audited audit" ||
		detail(r, "stored") != "stored at broker broker-a, queue 3, offset 42 (commit log offset 43981), topic orders" ||
		r.Timeline[3].At == nil || r.Timeline[3].At.UnixMilli() != 1800000090000 {
		t.Fatalf("present: %s %+v", steps, r.Timeline)
	}
	steps, r = row(table, 2)
	if steps != "written lost sent stored audit" || !strings.Contains(detail(r, "lost"), lost) ||
		!strings.HasPrefix(detail(r, "stored"), "stored at broker broker-b, queue 0, offset 7, topic") {
		t.Fatalf("lost and sent again: %s %+v", steps, r.Timeline)
	}
	steps, r = row(table, 3)
	if steps != "written lost due" || !strings.Contains(detail(r, "lost"), "made due again (no retry spent)") || r.Timeline[1].At == nil {
		t.Fatalf("lost, waiting: %s %+v", steps, r.Timeline)
	}
	steps, r = row(table, 4)
	if steps != "written sent stored audit" || !strings.Contains(detail(r, "stored"), "no position recorded") || !r.StoredAt.Recorded {
		t.Fatalf("a send the journal does not hold: %s %+v", steps, r.Timeline)
	}
	steps, r = row(otherTable, 1)
	if steps != "written sent stored audit" || !strings.Contains(detail(r, "stored"), "records no broker") || r.StoredAt.Recorded {
		t.Fatalf("table without a journal: %s %+v", steps, r.Timeline)
	}
}

// TestExplorerReadsAnAdoptedTablesNulls: an adopted table whose contract columns are still
// nullable (before `outbox-relay migrate` makes them NOT NULL) holds a row with NULLs; the
// explorer finds it by msg_id and shows its page, reading the NULLs as the relay does.
func TestExplorerReadsAnAdoptedTablesNulls(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	for _, q := range []string{
		"ALTER TABLE `" + table + "` MODIFY retry_count int NULL, MODIFY max_retry_count int NULL, MODIFY next_retry_time bigint NULL," +
			" MODIFY is_deleted tinyint NULL, MODIFY msg_keys varchar(512) NULL, MODIFY sharding_key varchar(128) NULL, MODIFY tag varchar(128) NULL," +
			" MODIFY status tinyint NULL",
		"INSERT INTO `" + table + "` (id, msg_id, topic, content, status, retry_count, max_retry_count, next_retry_time, is_deleted, msg_keys, sharding_key, tag)" +
			" VALUES (1, 'nulls', 'orders', 'x', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), (2, 'nulls-pending', 'orders', 'x', 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
	} {
		if _, err := b.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	var ans SearchAnswer
	if code, raw := b.do(t, "GET", "/ui/api/search?msg_id=nulls-pending", nil, "", &ans); code != 200 || len(ans.Messages) != 1 ||
		ans.Messages[0].MaxRetryCount != 3 || ans.Messages[0].StatusName != "pending" {
		t.Fatalf("search: %d %s", code, raw)
	}
	var r RowAnswer
	if code, raw := b.do(t, "GET", "/ui/api/row?table="+table+"&id=1", nil, "", &r); code != 200 || r.Timeline[len(r.Timeline)-1].Step != "unknown" {
		t.Fatalf("a row of NULL status: %d %s", code, raw)
	}
}
