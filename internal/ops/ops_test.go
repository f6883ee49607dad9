// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

const table = "local_message"

type bundle struct {
	ctx context.Context
	db  *sql.DB
}

func setup(t *testing.T) bundle {
	t.Helper()
	tdb := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, tdb.DB, table); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return bundle{ctx: ctx, db: tdb.DB}
}

// row is a factory for outbox rows; ages are in seconds before the database's NOW().
type row struct {
	msgID, topic, tag   string
	status              int
	deleted             bool
	createAge, updAge   int
	nextRetry, sentTime int64
	failReason          string
	retryCount          int
}

func (b bundle) insert(t *testing.T, rows ...row) {
	t.Helper()
	for i, r := range rows {
		if r.msgID == "" {
			r.msgID = fmt.Sprintf("m-%d-%s", i, testenv.RandomSuffix(8))
		}
		if r.topic == "" {
			r.topic = "orders"
		}
		var reason any
		if r.failReason != "" {
			reason = r.failReason
		}
		// A settled row's next_retry_time is when it was settled, as the relay writes it: its
		// sent_time, or else its update_time when it has an age (else 0, as older writers left it).
		_, err := b.db.ExecContext(b.ctx, "INSERT INTO "+table+
			" (msg_id, topic, tag, content, status, is_deleted, create_time, update_time, next_retry_time, sent_time, fail_reason, retry_count)"+
			" VALUES (?, ?, ?, 'body', ?, ?, NOW() - INTERVAL ? SECOND, NOW() - INTERVAL ? SECOND,"+
			" CASE WHEN ? <> 0 THEN ? WHEN ? NOT IN (2, 3) THEN 0 WHEN ? > 0 THEN ? WHEN ? > 0 THEN (UNIX_TIMESTAMP(NOW()) - ?) * 1000 ELSE 0 END, ?, ?, ?)",
			r.msgID, r.topic, r.tag, r.status, r.deleted, r.createAge, r.updAge,
			r.nextRetry, r.nextRetry, r.status, r.sentTime, r.sentTime, r.updAge, r.updAge,
			r.sentTime, reason, r.retryCount)
		if err != nil {
			t.Fatalf("insert %+v: %v", r, err)
		}
	}
}

// snapshot returns every row as a string keyed by msg_id, for before/after comparisons.
func (b bundle) snapshot(t *testing.T) map[string]string {
	t.Helper()
	rows, err := b.db.QueryContext(b.ctx, "SELECT msg_id, status, retry_count, next_retry_time, COALESCE(fail_reason, '<null>'), is_deleted, sent_time FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, reason string
		var st, rc, del int
		var next, sent int64
		if err := rows.Scan(&id, &st, &rc, &next, &reason, &del, &sent); err != nil {
			t.Fatal(err)
		}
		out[id] = fmt.Sprintf("status=%d retry=%d next=%d reason=%s deleted=%d sent=%d", st, rc, next, reason, del, sent)
	}
	return out
}

func TestStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := time.Now()
	halfHourAgo := now.Add(-30 * time.Minute).UnixMilli()
	b.insert(t,
		row{topic: "orders", status: 0, createAge: 7200, nextRetry: halfHourAgo}, // due for 30 min
		row{topic: "orders", status: 0},
		row{topic: "orders", status: 1, nextRetry: now.Add(time.Hour).UnixMilli()}, // not due yet
		row{topic: "stock", status: 1, nextRetry: 1},
		row{topic: "stock", status: 0, deleted: true, createAge: 99999}, // never due
		row{topic: "orders", status: 2}, row{topic: "orders", status: 2}, row{topic: "stock", status: 2},
		row{topic: "stock", status: 3}, row{topic: "orders", status: 3},
		row{topic: "orders", status: 4}, // handed: the broker delivers it, never due
	)
	r, err := Status(b.ctx, b.db, table, now)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pending != 2 || r.Failed != 2 || r.Sent != 3 || r.Dead != 2 || r.Handed != 1 || r.Deleted != 1 { // the deleted row is not pending
		t.Fatalf("counts = %+v", r)
	}
	if r.Due != 3 {
		t.Fatalf("due = %d, want 3", r.Due)
	}
	if r.OldestDueAge != 30*time.Minute {
		t.Fatalf("oldest due age = %s, want 30m", r.OldestDueAge)
	}
	want := []TopicCount{
		{"pending", "orders", false, 2}, {"pending", "stock", true, 1},
		{"failed", "orders", false, 1}, {"failed", "stock", false, 1},
		{"dead", "orders", false, 1}, {"dead", "stock", false, 1},
	}
	if !reflect.DeepEqual(r.ByTopic, want) {
		t.Fatalf("by topic = %+v\nwant %+v", r.ByTopic, want)
	}
	// The count must match a plain count of the table.
	var total int64
	if err := b.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&total); err != nil {
		t.Fatal(err)
	}
	if r.Pending+r.Failed+r.Sent+r.Dead+r.Handed+r.Deleted != total {
		t.Fatalf("status counts add up to %d, table has %d", r.Pending+r.Failed+r.Sent+r.Dead+r.Handed+r.Deleted, total)
	}
}

func TestStatusEmptyAndBadTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r, err := Status(b.ctx, b.db, table, time.Now())
	if err != nil || r.Due != 0 || r.OldestDueAge != 0 || len(r.ByTopic) != 0 {
		t.Fatalf("empty: %+v, %v", r, err)
	}
	if _, err := Status(b.ctx, b.db, "x; DROP TABLE y", time.Now()); err == nil {
		t.Fatal("invalid table name accepted")
	}
	if _, err := Status(b.ctx, b.db, "no_such_table", time.Now()); err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Fatalf("missing table: %v", err)
	}
}

func deadFixture(t *testing.T, b bundle) {
	b.insert(t,
		row{msgID: "d1", topic: "order-created", tag: "vip", status: 3, updAge: 3 * 86400, failReason: "boom", retryCount: 4},
		row{msgID: "d2", topic: "order-paid", tag: "", status: 3, updAge: 60},
		row{msgID: "d3", topic: "stock", tag: "vip", status: 3, updAge: 2 * 86400},
		row{msgID: "d4", topic: "order_x", tag: "", status: 3},                  // "_" must not act as a wildcard
		row{msgID: "d5", topic: "order-created", status: 3, deleted: true},      // deleted: never listed
		row{msgID: "p1", topic: "order-created", status: 0},                     // not dead
		row{msgID: "s1", topic: "order-created", status: 2, updAge: 10 * 86400}, // sent
		row{msgID: "f1", topic: "order-created", status: 1, retryCount: 2, failReason: "retrying"},
	)
}

func ids(ms []DeadMessage) []string {
	out := []string{}
	for _, m := range ms {
		out = append(out, m.MsgID)
	}
	return out
}

func TestDeadList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadFixture(t, b)
	tests := []struct {
		name  string
		f     Filter
		limit int
		want  []string
	}{
		{"all", Filter{}, 0, []string{"d1", "d2", "d3", "d4"}},
		{"topic exact", Filter{Topic: "order-created"}, 0, []string{"d1"}},
		{"topic glob", Filter{Topic: "order-*"}, 0, []string{"d1", "d2"}},
		{"underscore literal", Filter{Topic: "order_*"}, 0, []string{"d4"}},
		{"tag", Filter{Tag: "vip"}, 0, []string{"d1", "d3"}},
		{"older than", Filter{OlderThan: 24 * time.Hour}, 0, []string{"d1", "d3"}},
		{"combined", Filter{Topic: "*", Tag: "vip", OlderThan: 60 * time.Hour}, 0, []string{"d1"}},
		{"msg ids", Filter{MsgIDs: []string{"d2", "p1", "zz"}}, 0, []string{"d2"}},
		{"limit", Filter{}, 2, []string{"d1", "d2"}},
	}
	for _, tt := range tests {
		got, err := DeadList(b.ctx, b.db, table, tt.f, 0, tt.limit)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !reflect.DeepEqual(ids(got), tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, ids(got), tt.want)
		}
		n, err := CountDead(b.ctx, b.db, table, tt.f)
		if err != nil {
			t.Fatal(err)
		}
		if tt.limit == 0 && n != int64(len(tt.want)) {
			t.Errorf("%s: CountDead = %d, want %d", tt.name, n, len(tt.want))
		}
	}
	page1, _ := DeadList(b.ctx, b.db, table, Filter{}, 0, 2)
	page2, _ := DeadList(b.ctx, b.db, table, Filter{}, page1[1].ID, 2)
	if !reflect.DeepEqual(ids(page2), []string{"d3", "d4"}) {
		t.Fatalf("page 2 = %v", ids(page2))
	}
	d1 := page1[0]
	if d1.FailReason != "boom" || d1.RetryCount != 4 || d1.Tag != "vip" || d1.ContentChars != 4 || d1.UpdateTime.After(time.Now().Add(-47*time.Hour)) {
		t.Fatalf("d1 = %+v", d1)
	}
}

func TestRequeueChangesExactlyTheSelectedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	deadFixture(t, b)
	before := b.snapshot(t)

	if _, err := Requeue(b.ctx, b.db, table, Filter{}); err != ErrNoSelection {
		t.Fatalf("empty filter: %v, want ErrNoSelection", err)
	}
	res, err := Requeue(b.ctx, b.db, table, Filter{MsgIDs: []string{"d1", "d3", "p1", "s1", "d5", "nope"}, Tag: "vip"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Requeued, []string{"d1", "d3"}) {
		t.Fatalf("requeued %v", res.Requeued)
	}
	wantSkipped := map[string]string{"p1": "not dead: pending", "s1": "not dead: sent", "d5": "deleted (is_deleted = 1)", "nope": "not found"}
	if !reflect.DeepEqual(res.Skipped, wantSkipped) {
		t.Fatalf("skipped %v", res.Skipped)
	}
	after := b.snapshot(t)
	for id, was := range before {
		now := after[id]
		switch id {
		case "d1", "d3":
			if want := "status=0 retry=0 next=0 reason=<null> deleted=0 sent=0"; now != want {
				t.Errorf("%s: %s, want %s", id, now, want)
			}
		default:
			if now != was {
				t.Errorf("%s changed: %s -> %s", id, was, now)
			}
		}
	}
	// Requeued rows are no longer dead: a second run changes nothing.
	res, err = Requeue(b.ctx, b.db, table, Filter{MsgIDs: []string{"d1"}})
	if err != nil || len(res.Requeued) != 0 || res.Skipped["d1"] != "not dead: pending" {
		t.Fatalf("second run: %+v %v", res, err)
	}
}

func TestRequeueAllInChunks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 2*requeueChunk + 37
	var sb strings.Builder
	args := []any{}
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteString(",")
		}
		sb.WriteString("(?, 'bulk', '', 'x', 3, 5, 'dead')")
		args = append(args, fmt.Sprintf("bulk-%05d", i))
	}
	if _, err := b.db.ExecContext(b.ctx, "INSERT INTO "+table+" (msg_id, topic, tag, content, status, retry_count, fail_reason) VALUES "+sb.String(), args...); err != nil {
		t.Fatal(err)
	}
	b.insert(t, row{msgID: "sent", status: 2}, row{msgID: "pend", status: 0, retryCount: 1})
	res, err := Requeue(b.ctx, b.db, table, Filter{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Requeued) != n || !sort.StringsAreSorted(res.Requeued) {
		t.Fatalf("requeued %d rows, want %d in order", len(res.Requeued), n)
	}
	var dead, reset int
	b.db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE status = 3").Scan(&dead)
	b.db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE status = 0 AND retry_count = 0 AND fail_reason IS NULL").Scan(&reset)
	if dead != 0 || reset != n {
		t.Fatalf("dead left %d, reset %d", dead, reset)
	}
	snap := b.snapshot(t)
	if snap["sent"] != "status=2 retry=0 next=0 reason=<null> deleted=0 sent=0" || !strings.HasPrefix(snap["pend"], "status=0 retry=1") {
		t.Fatalf("untouched rows changed: %v %v", snap["sent"], snap["pend"])
	}
}

func TestPurgeRemovesOnlyOldSentRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := time.Now().Add(-10 * 24 * time.Hour).UnixMilli()
	day := 86400
	var rows []row
	for i := 0; i < 7; i++ {
		rows = append(rows, row{msgID: fmt.Sprintf("old-sent-%d", i), status: 2, updAge: 8 * day, sentTime: old})
	}
	rows = append(rows,
		row{msgID: "legacy-sent", status: 2, updAge: 9 * day},                                           // sent_time 0: seed 002 relay
		row{msgID: "new-sent", status: 2, updAge: 3600, sentTime: time.Now().UnixMilli()},               // too young
		row{msgID: "old-update-new-sent", status: 2, updAge: 9 * day, sentTime: time.Now().UnixMilli()}, // sent recently
		row{msgID: "old-pending", status: 0, updAge: 30 * day},
		row{msgID: "old-failed", status: 1, updAge: 30 * day},
		row{msgID: "old-dead", status: 3, updAge: 30 * day},
		row{msgID: "old-handed", status: 4, updAge: 8 * day}, // delivered by the broker
		row{msgID: "new-handed", status: 4, updAge: 3600},
	)
	b.insert(t, rows...)

	dry, err := Purge(b.ctx, b.db, table, PurgeOptions{OlderThan: 7 * 24 * time.Hour, DryRun: true})
	if err != nil || dry.Deleted != 9 || !dry.DryRun {
		t.Fatalf("dry run: %+v %v", dry, err)
	}
	if len(b.snapshot(t)) != 15 {
		t.Fatal("dry run deleted rows")
	}
	res, err := Purge(b.ctx, b.db, table, PurgeOptions{OlderThan: 7 * 24 * time.Hour, BatchSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 9 || res.Batches != 4 {
		t.Fatalf("purge: %+v, want 9 rows in 4 batches (3 of sent rows, 1 of handed ones)", res)
	}
	left := []string{}
	for id := range b.snapshot(t) {
		left = append(left, id)
	}
	sort.Strings(left)
	want := []string{"new-handed", "new-sent", "old-dead", "old-failed", "old-pending", "old-update-new-sent"}
	if !reflect.DeepEqual(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	if _, err := Purge(b.ctx, b.db, table, PurgeOptions{}); err == nil {
		t.Fatal("zero retention accepted")
	}
}

// The purge ranges over the sent rows of the (status, next_retry_time) index, the index a row
// moves in when it is sent anyway: no index of its own (the contract's former
// (status, update_time) cost every write-back a second index entry moved).
func TestPurgePlanRangesOverScanIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// A history of mostly sent rows, settled one a second over the last 2000 s.
	if _, err := b.db.ExecContext(b.ctx, "INSERT INTO "+table+" (msg_id, topic, content, status, next_retry_time, sent_time)"+
		" SELECT CONCAT('h-', seq), 't', 'x', IF(seq % 10 = 0, seq % 4, 2), (UNIX_TIMESTAMP(NOW()) - seq) * 1000, (UNIX_TIMESTAMP(NOW()) - seq) * 1000 FROM seq_1_to_2000"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.ExecContext(b.ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	q, err := scanQuery(b.ctx, b.db, sqlPurgeSelect, table)
	if err != nil {
		t.Fatal(err)
	}
	horizon := time.Now().Add(-1000 * time.Second).UnixMilli()
	for _, status := range purgedStatuses {
		plans := testenv.Explain(t, b.db, q, status, horizon, int64(math.MinInt64), int64(math.MinInt64), int64(math.MinInt64), "2100-01-01 00:00:00", horizon, 1000)
		if len(plans) != 1 {
			t.Fatalf("EXPLAIN: %v", plans)
		}
		plan := plans[0]
		if plan["key"] != "idx_status_retry" || plan["type"] != "range" || strings.Contains(plan["Extra"], "filesort") {
			t.Fatalf("purge plan of status %d does not range over idx_status_retry in its order: %v", status, plan)
		}
		t.Logf("purge plan of status %d: %v", status, plan)
	}
}

// Paging over several tables shows every dead row exactly once: 5 dead rows in ta, 3 in tb,
// pages of 5.
func TestDeadPageOverSeveralTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tb := range []string{"ta", "tb"} {
		if err := schema.Migrate(b.ctx, b.db, tb); err != nil {
			t.Fatal(err)
		}
	}
	insertInto := func(tb string, n int) {
		for i := 0; i < n; i++ {
			if _, err := b.db.ExecContext(b.ctx, "INSERT INTO "+tb+" (msg_id, topic, content, status, fail_reason) VALUES (?, 'orders', 'x', 3, 'boom')",
				fmt.Sprintf("%s-%d", tb, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	insertInto("ta", 5)
	insertInto("tb", 3)
	// tb's ids overlap ta's: an id cursor alone would skip them.
	tables := []string{"ta", "tb"}
	var seen []string
	var cur Cursor
	for page := 1; ; page++ {
		rows, next, err := DeadPage(b.ctx, b.db, tables, Filter{}, cur, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			seen = append(seen, r.Table+"/"+r.MsgID)
		}
		if page == 1 && (len(rows) != 5 || next == nil || next.String() != "ta:5") {
			t.Fatalf("page 1: %d rows, next %v", len(rows), next)
		}
		if next == nil {
			if page != 2 || len(rows) != 3 {
				t.Fatalf("page %d: %d rows, want page 2 with 3", page, len(rows))
			}
			break
		}
		if cur, err = ParseCursor(next.String()); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"ta/ta-0", "ta/ta-1", "ta/ta-2", "ta/ta-3", "ta/ta-4", "tb/tb-0", "tb/tb-1", "tb/tb-2"}
	if !reflect.DeepEqual(seen, want) {
		t.Fatalf("pages showed %v, want %v", seen, want)
	}
	// A page that ends exactly at the last row has no next page.
	if rows, next, err := DeadPage(b.ctx, b.db, tables, Filter{}, Cursor{Table: "ta", ID: 5}, 3); err != nil || len(rows) != 3 || next != nil {
		t.Fatalf("last page: %d rows, next %v, %v", len(rows), next, err)
	}
	if _, _, err := DeadPage(b.ctx, b.db, tables, Filter{}, Cursor{Table: "tc", ID: 1}, 3); err == nil {
		t.Fatal("cursor on an unknown table accepted")
	}
	for _, bad := range []string{"ta", "ta:", ":1", "ta:x", "ta:-1"} {
		if _, err := ParseCursor(bad); err == nil {
			t.Errorf("ParseCursor(%q) accepted", bad)
		}
	}
}

// A table called order works with every operator command.
func TestReservedWordTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const order = "order"
	if err := schema.Migrate(b.ctx, b.db, order); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.ExecContext(b.ctx, "INSERT INTO `order` (msg_id, topic, content, status, fail_reason, sent_time, update_time) VALUES"+
		" ('d1', 'orders', 'x', 3, 'boom', 0, NOW()), ('s1', 'orders', 'x', 2, NULL, 1, NOW() - INTERVAL 2 DAY), ('p1', 'orders', 'x', 0, NULL, 0, NOW())"); err != nil {
		t.Fatal(err)
	}
	st, err := Status(b.ctx, b.db, order, time.Now())
	if err != nil || st.Pending != 1 || st.Sent != 1 || st.Dead != 1 {
		t.Fatalf("Status = %+v, %v", st, err)
	}
	if rows, _, err := DeadPage(b.ctx, b.db, []string{order}, Filter{}, Cursor{}, 10); err != nil || len(rows) != 1 {
		t.Fatalf("DeadPage = %v, %v", rows, err)
	}
	if n, err := CountDead(b.ctx, b.db, order, Filter{}); err != nil || n != 1 {
		t.Fatalf("CountDead = %d, %v", n, err)
	}
	if res, err := Requeue(b.ctx, b.db, order, Filter{MsgIDs: []string{"d1", "zz"}}); err != nil || len(res.Requeued) != 1 || res.Skipped["zz"] != SkipNotFound {
		t.Fatalf("Requeue = %+v, %v", res, err)
	}
	if res, err := Purge(b.ctx, b.db, order, PurgeOptions{OlderThan: 24 * time.Hour}); err != nil || res.Deleted != 1 {
		t.Fatalf("Purge = %+v, %v", res, err)
	}
}

// The purge deletes the stored-position journal's entries settled before the sent rows'
// horizon, in batches, and keeps the newer ones, so that the journal never outgrows the
// table; a dry run counts them; a table without a journal is purged as before.
func TestPurgeDeletesOldJournalEntries(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j, err := storedlog.Open(b.db, table)
	if err != nil {
		t.Fatal(err)
	}
	now, err := DBNow(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	old, young := now.Add(-10*24*time.Hour).UnixMilli(), now.Add(-time.Hour).UnixMilli()
	var entries []storedlog.Entry
	for i := int64(0); i < 7; i++ {
		settled := old + i
		if i >= 5 {
			settled = young + i
		}
		entries = append(entries, storedlog.Entry{SettledMs: settled, Positions: []storedlog.Pos{{ID: i + 1, Broker: "broker-a", QueueID: 1, Offset: i, CommitOffset: -1}}})
	}
	if err := j.Append(b.ctx, entries); err != nil {
		t.Fatal(err)
	}
	b.insert(t, row{msgID: "old-sent", status: 2, updAge: 8 * 86400, sentTime: old})
	opts := PurgeOptions{OlderThan: 7 * 24 * time.Hour, BatchSize: 2}
	dry, err := Purge(b.ctx, b.db, table, PurgeOptions{OlderThan: opts.OlderThan, DryRun: true})
	if err != nil || dry.Deleted != 1 || dry.JournalDeleted != 5 {
		t.Fatalf("dry run: %+v, %v; want 1 row and 5 journal entries", dry, err)
	}
	res, err := Purge(b.ctx, b.db, table, opts)
	if err != nil || res.Deleted != 1 || res.JournalDeleted != 5 {
		t.Fatalf("purge: %+v, %v; want 1 row and 5 journal entries", res, err)
	}
	var left, oldest int64
	if err := b.db.QueryRow("SELECT COUNT(*), MIN(settled_time) FROM local_message_stored").Scan(&left, &oldest); err != nil || left != 2 || oldest != young+5 {
		t.Fatalf("journal after purge: %d entries from %d, %v; want the 2 young ones from %d", left, oldest, err, young+5)
	}
	if _, err := b.db.Exec("DROP TABLE local_message_stored"); err != nil {
		t.Fatal(err)
	}
	b.insert(t, row{msgID: "old-sent-2", status: 2, updAge: 8 * 86400, sentTime: old})
	if res, err := Purge(b.ctx, b.db, table, opts); err != nil || res.Deleted != 1 || res.JournalDeleted != 0 {
		t.Fatalf("purge without a journal: %+v, %v", res, err)
	}
}
