// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestPageExaminesOnlyItsOwnRows guards the scan's cost: a page resuming after many rows held
// back earlier in the pass (same next_retry_time, lower ids) must not re-read them. It counts
// the index entries the server examined for one page, wherever the cursor stands, with the
// table's statistics young and then current (InnoDB refreshes them in the background once a
// tenth of a table changed; with them MariaDB 10.11 planned the unforced page query as a ref
// on status alone, walking every row before the cursor).
func TestPageExaminesOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	const rows, limit = 6000, 100
	for start := 0; start < rows; start += 1000 {
		var b strings.Builder
		b.WriteString("INSERT INTO local_message (msg_id, topic, content) VALUES ")
		for i := start; i < start+1000; i++ {
			if i > start {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "('m%d', 'orders', 'x')", i)
		}
		if _, err := db.Exec(b.String()); err != nil {
			t.Fatal(err)
		}
	}
	db.SetMaxOpenConns(1) // session counters below belong to the one connection
	r, err := New(db.DB, nil, nopPublisher{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, stats := range []string{"young", "current"} {
		if stats == "current" {
			if _, err := db.Exec("ANALYZE TABLE local_message"); err != nil {
				t.Fatal(err)
			}
		}
		for _, held := range []int64{1000, 3000, 5000} {
			if _, err := db.Exec("FLUSH STATUS"); err != nil {
				t.Fatal(err)
			}
			page, _, _, err := r.eng.ReadPage(ctx, 0, 1<<62, outboxsql.Cursor{Next: 0, ID: held}, limit, int64(r.cfg.MaxPageBytes))
			if err != nil {
				t.Fatal(err)
			}
			if len(page) != limit || page[0].ID != held+1 {
				t.Fatalf("page has %d rows starting at id %d, want %d from %d", len(page), page[0].ID, limit, held+1)
			}
			var name string
			var icp, next int
			if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Handler_icp_attempts'").Scan(&name, &icp); err != nil {
				t.Fatal(err)
			}
			if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Handler_read_next'").Scan(&name, &next); err != nil {
				t.Fatal(err)
			}
			if examined := max(icp, next); examined > 2*limit {
				t.Errorf("statistics %s: one page of %d examined %d index entries: it re-reads the %d rows before the cursor", stats, limit, examined, held)
			}
		}
	}
}

// nopPublisher is a Publisher for tests that only read pages.
type nopPublisher struct{}

func (nopPublisher) Send(context.Context, Route, ...*Message) error { return nil }
func (nopPublisher) Close() error                                   { return nil }

// TestPageStaysWithinItsByteBudget: a page of large bodies stops at MaxPageBytes, and a body
// over MaxBodyBytes is recognised by its length without being loaded, then marked dead while
// the rest are sent.
func TestPageStaysWithinItsByteBudget(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	const mib = 1 << 20
	big := strings.Repeat("b", mib)
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES ('huge', 'orders', REPEAT('h', ?))", 5*mib); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 12; i++ {
		if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES (?, 'orders', ?)", fmt.Sprintf("big-%d", i), big); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(db.DB, nil, nopPublisher{}, Config{MaxPageBytes: 3 * mib, MaxBodyBytes: 4 * mib})
	if err != nil {
		t.Fatal(err)
	}
	rows, full, cut, err := r.eng.ReadPage(ctx, 0, 1<<62, outboxsql.Cursor{Next: -1 << 62}, 500, int64(r.cfg.MaxPageBytes))
	if err != nil {
		t.Fatal(err)
	}
	loaded := 0
	for _, rw := range rows {
		loaded += len(rw.Content)
	}
	if !cut || full || loaded > 3*mib || len(rows) != 4 {
		t.Fatalf("page of %d rows holding %d body bytes (cut %v), want 4 rows (the huge one unloaded, then 3 of 1 MiB) within 3 MiB", len(rows), loaded, cut)
	}
	if rows[0].MsgID != "huge" || rows[0].Content != nil || rows[0].ContentLen != 5*mib {
		t.Fatalf("the oversized row: msg_id %s, %d bytes loaded, length %d; want its length known and its body not loaded", rows[0].MsgID, len(rows[0].Content), rows[0].ContentLen)
	}
	st, err := r.DrainOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 12 || st.Dead != 1 {
		t.Fatalf("drain: %+v, want 12 sent and the oversized one dead", st)
	}
	var reason string
	if err := db.QueryRow("SELECT fail_reason FROM local_message WHERE msg_id = 'huge' AND status = 3").Scan(&reason); err != nil || !strings.Contains(reason, "over the limit") {
		t.Fatalf("the oversized row: %q, %v; want dead saying it is over the limit", reason, err)
	}
}

// TestOrderedCheckIgnoresTheKeysHistory guards that the ordered check reads what decides
// and not a key's sent history (docs/decisions.md, "Indexes (issue 21)"): a page with a
// key's 3 unsent rows reads the rows between them and the key's newest sent row below them
// only, with the table's statistics young and current; so does a page with the last of
// them, held behind the other two. So does a table with the previous (sharding_key, status,
// id) index instead.
func TestOrderedCheckIgnoresTheKeysHistory(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"contract", "previous"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			orderedCheckReads(t, layout)
		})
	}
}

// orderedCheckReads is TestOrderedCheckIgnoresTheKeysHistory on a table of layout: the
// contract's, or the previous one with (sharding_key, status, id) instead of (sharding_key, id).
func orderedCheckReads(t *testing.T, layout string) {
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	if layout == "previous" {
		if _, err := db.Exec("ALTER TABLE local_message DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"); err != nil {
			t.Fatal(err)
		}
	}
	// 5,000 sent rows of one order, then its 3 unsent ones, other keys' rows around them, and a
	// backlog of 10,000 unsent rows of other keys (so that the status index alone is no help).
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, sharding_key)
		SELECT CONCAT('h', seq), 'orders', 'x', 2, IF(seq % 2 = 0, 'order-1', CONCAT('order-', seq)) FROM seq_1_to_10000`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, sharding_key)
		SELECT CONCAT('u', seq), 'orders', 'x', 'order-1' FROM seq_1_to_3`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, sharding_key)
		SELECT CONCAT('b', seq), 'orders', 'x', CONCAT('other-', seq) FROM seq_1_to_10000`); err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1) // session counters below belong to the one connection
	r, err := New(db.DB, nil, nopPublisher{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, stats := range []string{"young", "current"} {
		if stats == "current" {
			if _, err := db.Exec("ANALYZE TABLE local_message"); err != nil {
				t.Fatal(err)
			}
		}
		var unsent []int64
		rows, err := db.Query("SELECT id FROM local_message WHERE msg_id LIKE 'u%' ORDER BY id")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			unsent = append(unsent, id)
		}
		rows.Close()
		if err := r.eng.Store().ScanIndex(ctx); err != nil { // once, before the counters
			t.Fatal(err)
		}
		for _, page := range [][]int64{unsent, unsent[2:]} {
			if _, err := db.Exec("FLUSH STATUS"); err != nil {
				t.Fatal(err)
			}
			k := outboxsql.OrderKey{Topic: "orders", Key: "order-1"}
			heads, err := r.eng.Store().OrderedHeads(ctx, map[outboxsql.OrderKey][]int64{k: page}, func(string, string) bool { return true })
			if err != nil {
				t.Fatal(err)
			}
			if h, held := heads[k]; (len(page) == 3) == held || held && h.ID != unsent[1] {
				t.Fatalf("page %v of order-1: held behind %+v (%v); want the 3 unsent rows free, the last held behind the second", page, h, held)
			}
			examined := 0
			for _, counter := range []string{"Handler_read_next", "Handler_read_prev", "Handler_read_key"} {
				var name string
				var n int
				if err := db.QueryRow("SHOW SESSION STATUS LIKE '"+counter+"'").Scan(&name, &n); err != nil {
					t.Fatal(err)
				}
				examined += n
			}
			if examined > 20 {
				t.Errorf("%s layout, statistics %s: checking %d of a key's rows examined %d index entries: it walks the key's 5,000 sent rows", layout, stats, len(page), examined)
			}
		}
	}
}
