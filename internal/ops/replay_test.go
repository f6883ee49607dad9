// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// replayFixture writes 3000 rows whose ids have gaps (3, 6, ..., 4500, then 200001, ...):
// row n has msg_id r-n, topic orders or payments (n odd), tag paid or created (n % 3 == 0),
// msg_keys "SN-n cust-(n%7)" (none when n % 5 == 0), sharding_key cust-(n%7), status cycling
// 2, 2, 2, 0, 1, 3, 4, sent_time base+n s for sent rows and next_retry_time base+n s.
func replayFixture(t *testing.T, b bundle, base int64) {
	t.Helper()
	_, err := b.db.ExecContext(b.ctx, "INSERT INTO "+table+" (id, msg_id, topic, tag, content, status, msg_keys, sharding_key, sent_time, next_retry_time)"+
		" SELECT IF(seq <= 1500, seq * 3, 200000 + seq), CONCAT('r-', seq), IF(seq % 2 = 1, 'payments', 'orders'), IF(seq % 3 = 0, 'created', 'paid'),"+
		" CONCAT('{\"n\":', seq, '}'), ELT(seq % 7 + 1, 2, 2, 2, 0, 1, 3, 4), IF(seq % 5 = 0, '', CONCAT('SN-', seq, ' cust-', seq % 7)),"+
		" CONCAT('cust-', seq % 7), IF(seq % 7 < 3, ? + seq * 1000, 0), ? + seq * 1000 FROM seq_1_to_3000", base, base)
	if err != nil {
		t.Fatal(err)
	}
}

// replayModel is the fixture's rows a filter selects, by the fixture's formulas: what the
// SQL must choose.
func replayModel(f ReplayFilter, base int64) []string {
	var out []string
	for n := int64(1); n <= 3000; n++ {
		id := n * 3
		if n > 1500 {
			id = 200000 + n
		}
		st := []int{2, 2, 2, 0, 1, 3, 4}[n%7]
		topic, tag := "orders", "paid"
		if n%2 == 1 {
			topic = "payments"
		}
		if n%3 == 0 {
			tag = "created"
		}
		keys := fmt.Sprintf("SN-%d cust-%d", n, n%7)
		if n%5 == 0 {
			keys = ""
		}
		at := base + n*1000 // sent_time of a sent row, next_retry_time of a handed one
		msgID := fmt.Sprintf("r-%d", n)
		ok := st == 2 || (st == 4 && f.IncludeHanded)
		ok = ok && (f.SentFrom.IsZero() || at >= f.SentFrom.UnixMilli()) && (f.SentTo.IsZero() || at < f.SentTo.UnixMilli())
		ok = ok && (f.Topic == "" || f.Topic == topic) && (f.Tag == "" || f.Tag == tag)
		ok = ok && (f.Key == "" || slices.Contains(strings.Fields(keys), f.Key) || (keys == "" && msgID == f.Key))
		ok = ok && (f.ShardingKey == "" || f.ShardingKey == fmt.Sprintf("cust-%d", n%7))
		ok = ok && (f.FromID == 0 || id >= f.FromID) && (f.ToID == 0 || id <= f.ToID)
		ok = ok && (f.MsgIDs == nil || slices.Contains(f.MsgIDs, msgID))
		if ok {
			out = append(out, msgID)
		}
	}
	return out
}

// TestReplayFiltersChooseExactlyTheRows: every filter, alone and combined, selects exactly
// the rows the fixture's formulas say, the dry run counts them, and a walk in pages over
// windows of ids (lowered to 700 here, across a gap of 195,000 ids) reads each once; a walk
// resumed after a row's id reads exactly the rest.
func TestReplayFiltersChooseExactlyTheRows(t *testing.T) {
	b := setup(t)
	replayWindow = 700
	t.Cleanup(func() { replayWindow = ReplayWindow })
	base := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC).UnixMilli()
	replayFixture(t, b, base)
	at := func(n int64) time.Time { return time.UnixMilli(base + n*1000) }
	cases := map[string]ReplayFilter{
		"every sent row":          {},
		"time range":              {SentFrom: at(500), SentTo: at(2500)},
		"since only":              {SentFrom: at(2900)},
		"topic and tag":           {Topic: "payments", Tag: "created"},
		"key of msg_keys":         {Key: "cust-2"},
		"key of one order":        {Key: "SN-2401"},
		"msg_id of a keyless row": {Key: "r-1500"},
		"sharding key":            {ShardingKey: "cust-1"},
		"id range across the gap": {FromID: 4000, ToID: 201800},
		"msg_id list":             {MsgIDs: []string{"r-1", "r-2", "r-3", "r-7", "r-1400", "r-1400", "r-2999", "r-4", "absent"}},
		"list and topic":          {MsgIDs: []string{"r-1", "r-2", "r-7", "r-8"}, Topic: "orders"},
		"handed included":         {IncludeHanded: true, SentFrom: at(100), SentTo: at(1800)},
		"combined":                {Topic: "orders", Key: "cust-1", SentFrom: at(10), FromID: 30},
		"nothing":                 {Topic: "refunds"},
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			want := replayModel(f, base)
			rd, err := NewReplayReader(b.ctx, b.db, table, f, 0)
			if err != nil {
				t.Fatal(err)
			}
			n, err := rd.Count(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := walk(t, b, rd)
			if n != int64(len(want)) || !slices.Equal(got, want) {
				t.Fatalf("counted %d, read %d rows, want %d\nread %v\nwant %v", n, len(got), len(want), head(got), head(want))
			}
			if len(want) < 2 {
				return
			}
			// Resumed after the middle row: the rest, and the count of the rest.
			mid := len(want) / 2
			var midID int64
			if err := b.db.QueryRowContext(b.ctx, "SELECT id FROM "+table+" WHERE msg_id = ?", want[mid-1]).Scan(&midID); err != nil {
				t.Fatal(err)
			}
			rd, err = NewReplayReader(b.ctx, b.db, table, f, midID)
			if err != nil {
				t.Fatal(err)
			}
			if n, err = rd.Count(b.ctx); err != nil || n != int64(len(want)-mid) {
				t.Fatalf("resumed after id %d: counted %d (%v), want %d", midID, n, err, len(want)-mid)
			}
			if got := walk(t, b, rd); !slices.Equal(got, want[mid:]) {
				t.Fatalf("resumed after id %d: read %d rows, want %d", midID, len(got), len(want)-mid)
			}
		})
	}
}

// walk reads every row left to rd, in pages of 37, checking ids rise.
func walk(t *testing.T, b bundle, rd *ReplayReader) []string {
	t.Helper()
	var out []string
	last := int64(-1)
	for {
		rows, err := rd.Next(b.ctx, 37)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) == 0 {
			return out
		}
		for _, r := range rows {
			if r.ID <= last {
				t.Fatalf("id %d read after %d", r.ID, last)
			}
			last = r.ID
			out = append(out, r.MsgID)
		}
		if rd.After() < last { // a window read to its end may take After past the last row
			t.Fatalf("After() = %d after reading up to id %d", rd.After(), last)
		}
	}
}

// testenvExplain is the first row of the statement's EXPLAIN.
func testenvExplain(t *testing.T, b bundle, q string, args ...any) map[string]string {
	t.Helper()
	return testenv.Explain(t, b.db, q, args...)[0]
}

func head(s []string) []string { return s[:min(len(s), 12)] }

// TestReplayBadFiltersAreRefusedClearly: a filter that cannot select what the operator
// meant is refused before anything is read, saying what is wrong.
func TestReplayBadFiltersAreRefusedClearly(t *testing.T) {
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	cases := []struct {
		f    ReplayFilter
		want string
	}{
		{ReplayFilter{SentFrom: now, SentTo: now.Add(-time.Hour)}, "the time range is empty"},
		{ReplayFilter{SentFrom: now, SentTo: now}, "the time range is empty"},
		{ReplayFilter{FromID: 10, ToID: 9}, "the id range is empty: --from-id 10 is above --to-id 9"},
		{ReplayFilter{FromID: -1}, "ids are positive"},
		{ReplayFilter{Key: "SN-1 SN-2"}, "a key holds no space"},
		{ReplayFilter{Topic: "orders paid"}, "--topic"},
		{ReplayFilter{Tag: "a||b"}, "--tag"},
		{ReplayFilter{MsgIDs: []string{"m-1", ""}}, `msg_id 2 of the list ("") is not a msg_id`},
		{ReplayFilter{MsgIDs: []string{strings.Repeat("x", 65)}}, "is not a msg_id"},
	}
	for _, c := range cases {
		err := c.f.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error containing %q", c.f, err, c.want)
		}
	}
	if err := (ReplayFilter{Topic: "orders", Key: "SN-1", FromID: 1, ToID: 1}).Check(); err != nil {
		t.Errorf("a good filter refused: %v", err)
	}
}

// TestReplayReadsAreBoundedRangesOfThePrimaryKey: the count and the page read a range of the
// primary key bounded by the window, whatever the filter (no index covers sent_time or
// msg_keys), and a msg_id list is looked up in uk_msg_id: no statement scans the table.
func TestReplayReadsAreBoundedRangesOfThePrimaryKey(t *testing.T) {
	b := setup(t)
	replayFixture(t, b, time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC).UnixMilli())
	if _, err := b.db.ExecContext(b.ctx, "ANALYZE TABLE "+table); err != nil {
		t.Fatal(err)
	}
	f := ReplayFilter{Topic: "orders", Key: "cust-3", SentFrom: time.UnixMilli(1)}
	for _, c := range []struct {
		stmt, key string
		args      []any
	}{
		{sqlReplayCount, "PRIMARY", []any{0, 700}},
		{sqlReplayPage, "PRIMARY", []any{0, 700}},
		{strings.Replace(sqlReplayByMsgID, "{IDS}", "?, ?", 1), "uk_msg_id", []any{"r-1", "r-2", 0, 300000}},
	} {
		q, args, err := replayQuery(c.stmt, table, f)
		if err != nil {
			t.Fatal(err)
		}
		all := append(append([]any{}, c.args...), args...)
		if c.stmt == sqlReplayPage {
			all = append(all, 100)
		}
		plan := testenvExplain(t, b, q, all...)
		if plan["key"] != c.key || plan["type"] != "range" {
			t.Errorf("%s: plan %v, want a range of %s", q, plan, c.key)
		}
	}
}
