// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// exploreFixture writes 3000 rows created one a second over the last 3000 s (ids in
// creation order): order SN-<n> keyed "SN-<n> cust-<n%7>", sharding key "cust-<n%7>",
// statuses cycling 2, 2, 2, 0, 1, 3, 4. It returns the database clock at the insert.
func exploreFixture(t *testing.T, b bundle) time.Time {
	t.Helper()
	var now int64
	if err := b.db.QueryRowContext(b.ctx, "SELECT UNIX_TIMESTAMP(NOW())").Scan(&now); err != nil {
		t.Fatal(err)
	}
	_, err := b.db.ExecContext(b.ctx, "INSERT INTO "+table+" (msg_id, topic, tag, content, status, create_time, msg_keys, sharding_key, fail_reason)"+
		" SELECT CONCAT('m-', seq), IF(seq % 2 = 0, 'orders', 'payments'), 'paid', CONCAT('{\"order\":', seq, '}'),"+
		" ELT(seq % 7 + 1, 2, 2, 2, 0, 1, 3, 4), FROM_UNIXTIME(? - 3001 + seq), CONCAT('SN-', seq, ' cust-', seq % 7), CONCAT('cust-', seq % 7),"+
		" IF(seq % 7 IN (4, 5), 'broker busy', NULL) FROM seq_1_to_3000", now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.db.ExecContext(b.ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	return time.Unix(now, 0)
}

func msgIDs(p SearchPage) string {
	var out []string
	for _, m := range p.Messages {
		out = append(out, m.MsgID)
	}
	return strings.Join(out, " ")
}

// TestSearchMessagesAnyStatus finds rows of every status by msg_id, by one of their keys, by
// sharding key and by topic and status in a window, newest first, page by page.
func TestSearchMessagesAnyStatus(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := exploreFixture(t, b)
	day := Search{Status: -1, From: now.Add(-24 * time.Hour), To: now.Add(time.Hour)}
	search := func(s Search, before int64, limit int) SearchPage {
		t.Helper()
		p, err := SearchMessages(b.ctx, b.db, table, s, before, limit)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		return p
	}
	if p := search(Search{MsgID: "m-1001", Status: -1}, 0, 10); msgIDs(p) != "m-1001" || p.Messages[0].Status != 2 || p.Plan != "msg_id" {
		t.Fatalf("by msg_id: %+v", p)
	}
	key := day
	key.Key = "SN-1001" // not SN-10010 nor SN-21001
	if p := search(key, 0, 10); msgIDs(p) != "m-1001" || p.Plan != "window" || p.Before != 0 {
		t.Fatalf("by key: %+v", p)
	}
	key.Key = "SN-100%" // LIKE wildcards match literally
	if p := search(key, 0, 10); len(p.Messages) != 0 {
		t.Fatalf("a wildcard key matched %s", msgIDs(p))
	}
	handed := day
	handed.Status, handed.Topic = 4, "orders"
	p := search(handed, 0, 3)
	if msgIDs(p) != "m-2988 m-2974 m-2960" || p.Before != 2960 {
		t.Fatalf("handed orders, newest first: %q, before %d", msgIDs(p), p.Before)
	}
	if p = search(handed, p.Before, 3); msgIDs(p) != "m-2946 m-2932 m-2918" {
		t.Fatalf("the next page: %q", msgIDs(p))
	}
	// By sharding key, paged on idx_sharding_id: 3000/7 rows of cust-3, newest first.
	seen, before := 0, int64(0)
	for {
		p := search(Search{ShardingKey: "cust-3", Status: -1}, before, 100)
		for _, m := range p.Messages {
			if m.ShardingKey != "cust-3" || (before != 0 && m.ID >= before) {
				t.Fatalf("by sharding key: %+v after %d", m, before)
			}
		}
		seen += len(p.Messages)
		if before = p.Before; before == 0 {
			break
		}
	}
	if seen != 429 {
		t.Fatalf("by sharding key: %d rows, want 429", seen)
	}
	if _, err := SearchMessages(b.ctx, b.db, table, Search{Key: "SN-1", Status: -1}, 0, 10); err == nil {
		t.Fatal("a key search without a window was run")
	}
}

// TestSearchWindowIsBoundedAndContinues: a window search reads at most scanRows ids per call,
// says where it stopped, and goes on from there until it has read the whole window.
func TestSearchWindowIsBoundedAndContinues(t *testing.T) {
	b := setup(t)
	now := exploreFixture(t, b)
	scanRows = 400
	t.Cleanup(func() { scanRows = ScanRows })
	// Rows created between 2000 and 1000 s ago: ids 1001..2000.
	first, last, err := WindowIDs(b.ctx, b.db, table, now.Add(-2000*time.Second), now.Add(-1000*time.Second))
	if err != nil || first != 1001 || last != 2000 {
		t.Fatalf("WindowIDs = %d, %d, %v; want 1001, 2000", first, last, err)
	}
	s := Search{Status: 3, From: now.Add(-2000 * time.Second), To: now.Add(-1000 * time.Second)}
	var calls, found int
	for before := int64(0); ; calls++ {
		p, err := SearchMessages(b.ctx, b.db, table, s, before, 100)
		if err != nil {
			t.Fatal(err)
		}
		if p.ScannedTo-p.ScannedFrom+1 > 400 {
			t.Fatalf("a call read ids %d..%d", p.ScannedFrom, p.ScannedTo)
		}
		found += len(p.Messages)
		if before = p.Before; before == 0 {
			break
		}
	}
	if found != 143 || calls != 2 { // ids 1001..2000 with id%7 == 5; 400 + 400 + 200 ids
		t.Fatalf("found %d dead rows in %d more calls, want 143 in 2", found, calls)
	}
}

// TestSearchPlansUseIndexes shows the plan of every explorer statement (docs/dashboard.md
// quotes it): the unique key for a msg_id, idx_sharding_id in id order for a sharding key,
// a bounded range of the primary key for a window, point reads for the window's ids. None
// reads the whole table or sorts.
func TestSearchPlansUseIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	now := exploreFixture(t, b)
	s := Search{Key: "SN-1001", Topic: "orders", Status: 3, From: now.Add(-time.Hour), To: now}
	cases := []struct {
		name, stmt, plan, key string
		args                  []any
		types                 []string
	}{
		{"msg_id", sqlFindMsgID, "msg_id", "uk_msg_id", []any{"m-1006"}, []string{"const"}},
		{"sharding key", sqlFindSharding, "sharding_key", "idx_sharding_id", []any{"cust-3", int64(1 << 62)}, []string{"range", "ref"}},
		{"window", sqlFindWindow, "window", "PRIMARY", []any{int64(1000), int64(2000)}, []string{"range"}},
		{"window bound", sqlIDAt, "", "PRIMARY", []any{int64(1500)}, []string{"range"}},
	}
	for _, c := range cases {
		q, err := query(c.stmt, table)
		if err != nil {
			t.Fatal(err)
		}
		args := c.args
		if c.plan != "" {
			w, more := s.conditions(c.plan)
			q = strings.Replace(q, "{W}", w, 1)
			args = append(args, more...)
			if c.plan != "msg_id" {
				args = append(args, 50)
			}
		}
		plans := testenv.Explain(t, b.db, q, args...)
		plan := plans[0]
		if len(plans) != 1 || plan["key"] != c.key || !strings.Contains(strings.Join(c.types, ","), plan["type"]) || strings.Contains(plan["Extra"], "filesort") {
			t.Fatalf("%s: plan %v, want key %s, type %v, no filesort", c.name, plans, c.key, c.types)
		}
		t.Logf("%s: %s\n  type=%s key=%s rows=%s Extra=%s", c.name, q, plan["type"], plan["key"], plan["rows"], plan["Extra"])
	}
	q, _ := query(sqlIDBounds, table)
	if plan := testenv.Explain(t, b.db, q)[0]; !strings.Contains(plan["Extra"], "optimized away") {
		t.Fatalf("id bounds: %v", plan)
	}
}
