// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

func TestDeadQueryReasonAndWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t,
		row{msgID: "recent-big", status: 3, updAge: 10, failReason: "body too large: 5 MiB"},
		row{msgID: "recent-topic", status: 3, updAge: 20, failReason: "topic not exist"},
		row{msgID: "old-big", status: 3, updAge: 7200, failReason: "body TOO LARGE"},
		row{msgID: "literal", status: 3, updAge: 30, failReason: "100% of a_b"},
		row{msgID: "sent-big", status: 2, updAge: 10, failReason: "body too large"},
	)
	now := time.Now()
	cases := []struct {
		name string
		q    DeadQuery
		want []string
	}{
		{"reason, any case", DeadQuery{Reason: "too large"}, []string{"recent-big", "old-big"}},
		{"reason and died after", DeadQuery{Reason: "too large", DiedAfter: now.Add(-time.Hour)}, []string{"recent-big"}},
		{"died before", DeadQuery{DiedBefore: now.Add(-time.Hour)}, []string{"old-big"}},
		{"wildcards are literal", DeadQuery{Reason: "0% of a_"}, []string{"literal"}},
		{"a % alone matches no more than itself", DeadQuery{Reason: "%"}, []string{"literal"}},
		{"with a Filter", DeadQuery{Filter: Filter{MsgIDs: []string{"old-big", "recent-topic"}}, Reason: "large"}, []string{"old-big"}},
	}
	for _, c := range cases {
		got, err := DeadSearch(b.ctx, b.db, table, c.q, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var ids []string
		for _, m := range got {
			ids = append(ids, m.MsgID)
		}
		if fmt.Sprint(ids) != fmt.Sprint(c.want) {
			t.Errorf("%s: DeadSearch = %v, want %v", c.name, ids, c.want)
		}
		n, err := CountDeadQuery(b.ctx, b.db, table, c.q)
		if err != nil || n != int64(len(c.want)) {
			t.Errorf("%s: CountDeadQuery = %d, %v; want %d", c.name, n, err, len(c.want))
		}
	}

	before := b.snapshot(t)
	res, err := RequeueQuery(b.ctx, b.db, table, DeadQuery{Reason: "too large"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Requeued) != "[recent-big old-big]" || len(res.Skipped) != 0 {
		t.Fatalf("RequeueQuery = %+v", res)
	}
	after := b.snapshot(t)
	for id, was := range before {
		changed := after[id] != was
		if changed != (id == "recent-big" || id == "old-big") {
			t.Errorf("%s: %s -> %s", id, was, after[id])
		}
	}
	if !strings.HasPrefix(after["old-big"], "status=0 retry=0 next=0 reason=<null>") {
		t.Errorf("requeued row = %s", after["old-big"])
	}
	if _, err := RequeueQuery(b.ctx, b.db, table, DeadQuery{}); !errors.Is(err, ErrNoSelection) {
		t.Errorf("empty query: %v, want ErrNoSelection", err)
	}
}

func TestDeadBody(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"order":"A-1","note":"<script>alert(1)</script>"}`
	if _, err := b.db.Exec("INSERT INTO "+table+" (msg_id, topic, content, status, properties) VALUES ('d1', 'orders', ?, 3, '{\"k\":\"v\"}'), ('s1', 'orders', 'x', 2, NULL)", body); err != nil {
		t.Fatal(err)
	}
	var id, sentID int64
	_ = b.db.QueryRow("SELECT id FROM " + table + " WHERE msg_id = 'd1'").Scan(&id)
	_ = b.db.QueryRow("SELECT id FROM " + table + " WHERE msg_id = 's1'").Scan(&sentID)
	d, err := DeadBody(b.ctx, b.db, table, id, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if d.Content != body || d.Truncated || d.ContentChars != int64(len(body)) || d.Properties != `{"k":"v"}` || d.MsgID != "d1" {
		t.Fatalf("DeadBody = %+v", d)
	}
	if d, err = DeadBody(b.ctx, b.db, table, id, 10); err != nil || d.Content != body[:10] || !d.Truncated {
		t.Fatalf("cut to 10: %+v, %v", d, err)
	}
	if _, err := DeadBody(b.ctx, b.db, table, sentID, 10); !errors.Is(err, ErrNotDead) {
		t.Fatalf("sent row: %v, want ErrNotDead", err)
	}
}

func TestRecentActivity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.insert(t,
		row{status: 2, updAge: 30}, row{status: 2, updAge: 30}, row{status: 2, updAge: 1000},
		row{status: 1, updAge: 100},
		row{status: 3, updAge: 1000},
		row{status: 3, updAge: 5000}, // before the hour
		row{status: 0, updAge: 10},   // pending: not an outcome
	)
	now, err := DBClock(b.ctx, b.db)
	if err != nil {
		t.Fatal(err)
	}
	// One bucket per 10 minutes of the last hour; the rows' ages put them in known buckets.
	got, err := RecentActivity(b.ctx, b.db, table, now-3600, now+1, 600)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 || got[0].Start != now-3600 {
		t.Fatalf("buckets = %+v", got)
	}
	var sum Activity
	for _, a := range got {
		sum.Sent, sum.Failed, sum.Dead = sum.Sent+a.Sent, sum.Failed+a.Failed, sum.Dead+a.Dead
	}
	if sum.Sent != 3 || sum.Failed != 1 || sum.Dead != 1 {
		t.Fatalf("last hour: %+v (buckets %+v)", sum, got)
	}
	// 1000 s ago is in bucket (3600-1000)/600 = 4; 30 and 100 s ago in bucket 5.
	if got[4].Sent != 1 || got[4].Dead != 1 || got[5].Sent != 2 || got[5].Failed != 1 {
		t.Fatalf("buckets = %+v", got)
	}
	if _, err := RecentActivity(b.ctx, b.db, table, now, now, 60); err == nil {
		t.Fatal("empty span accepted")
	}
}

// The activity count must read only the recent part of the (status, next_retry_time) index,
// whatever the history: EXPLAIN shows, for the sent and dead rows, a range on idx_status_retry
// from the index alone, and for the failed rows the failed rows' range of the same index.
func TestRecentActivityPlan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 2000 sent rows, settled one a minute over 33 hours (MariaDB's sequence engine).
	if _, err := b.db.Exec("INSERT INTO " + table + " (msg_id, topic, content, status, update_time, next_retry_time, sent_time)" +
		" SELECT CONCAT('h-', seq), 't', 'x', 2, NOW() - INTERVAL seq MINUTE, (UNIX_TIMESTAMP(NOW()) - 60 * seq) * 1000," +
		" (UNIX_TIMESTAMP(NOW()) - 60 * seq) * 1000 FROM seq_1_to_2000"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.Exec("ANALYZE TABLE " + table); err != nil {
		t.Fatal(err)
	}
	now, _ := DBClock(b.ctx, b.db)
	q, err := scanQuery(b.ctx, b.db, sqlActivity, table)
	if err != nil {
		t.Fatal(err)
	}
	plans := testenv.Explain(t, b.db, q, now-3600, 60, now-3600, now, now-3600, 60, now-3600, now)
	var settled, failed map[string]string
	for _, p := range plans {
		switch p["id"] {
		case "1":
			settled = p
		case "2":
			failed = p
		}
	}
	if settled["key"] != "idx_status_retry" || settled["type"] != "range" || !strings.Contains(settled["Extra"], "Using index") {
		t.Fatalf("activity plan does not range over idx_status_retry alone for settled rows: %v", plans)
	}
	if failed["key"] != "idx_status_retry" || (failed["type"] != "range" && failed["type"] != "ref") {
		t.Fatalf("activity plan does not read the failed rows on idx_status_retry: %v", plans)
	}
	t.Logf("activity plan: %v", plans)
}
