// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// checkCase is one ordered stream's rows, oldest first, and the ids of a page among them.
type checkCase struct {
	name string
	rows []checkFixture
	page []int64
	// head is the row that holds the page's rows of the stream back (0: none), on every
	// index layout.
	head int64
}

// checkFixture is one row of a checkCase; its topic is "orders" unless given, its status
// pending, its tag ordered unless "close-check" (an unordered route).
type checkFixture struct {
	id      int64
	topic   string
	tag     string
	status  int
	deleted bool
	parked  bool // next_retry_time far ahead, as park leaves a held row
	upper   bool // the key in capitals: equal to it under the table's collation, another stream
}

// The ordered check decides each of these streams by the nearest older row of the stream
// (docs/decisions.md, "Ordered routes, stated exactly"), on every index layout: an unsent
// Row holds the page's rows, a sent one frees them, whatever lies below it (a late-committed
// Row goes on its own). The first cases fail on a read of the one nearest older row of any
// route or key spelling alone; the late-row cases on a read of the key's unsent rows.
var checkCases = []checkCase{
	{name: "an unordered sent row above an unsent ordered one",
		rows: []checkFixture{{id: 1}, {id: 2, tag: "close-check", status: 2}, {id: 3}}, page: []int64{3}, head: 1},
	{name: "an unordered unsent row holds nothing",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2, tag: "close-check"}, {id: 3}}, page: []int64{3}},
	{name: "many unordered rows above an unsent ordered one",
		rows: append([]checkFixture{{id: 1, status: 1}}, func() []checkFixture {
			var fs []checkFixture
			for id := int64(2); id <= 60; id++ {
				fs = append(fs, checkFixture{id: id, tag: "close-check", status: 2})
			}
			return append(fs, checkFixture{id: 61})
		}()...), page: []int64{61}, head: 1},
	{name: "rows of the key in capitals above an unsent row",
		rows: []checkFixture{{id: 1}, {id: 2, status: 2, upper: true}, {id: 3, status: 2, upper: true}, {id: 4, status: 2, upper: true},
			{id: 5, status: 2, upper: true}, {id: 6}}, page: []int64{6}, head: 1},
	{name: "a dead row above an unsent one",
		rows: []checkFixture{{id: 1, status: 1}, {id: 2, status: 3}, {id: 3}}, page: []int64{3}, head: 1},
	{name: "a dead row holds nothing",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2, status: 3}, {id: 3}}, page: []int64{3}},
	{name: "a soft-deleted sent row above an unsent one",
		rows: []checkFixture{{id: 1}, {id: 2, status: 2, deleted: true}, {id: 3}}, page: []int64{3}, head: 1},
	{name: "a soft-deleted unsent row holds nothing",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2, deleted: true}, {id: 3}}, page: []int64{3}},
	{name: "another topic's sent row of the key above a parked row",
		rows: []checkFixture{{id: 1, status: 1, parked: true}, {id: 2, parked: true}, {id: 3, topic: "payments", status: 2}, {id: 4}},
		page: []int64{4}, head: 2},
	{name: "a requeued dead row behind sent rows",
		rows: []checkFixture{{id: 1}, {id: 2, status: 2}, {id: 3, status: 2}, {id: 4}}, page: []int64{4}},
	{name: "a late-committed row waiting for its retry behind a sent row",
		rows: []checkFixture{{id: 1, status: 1, parked: true}, {id: 2, status: 2}, {id: 3}}, page: []int64{3}},
	{name: "an unordered unsent row and a late-committed one behind a sent row",
		rows: []checkFixture{{id: 1, tag: "close-check"}, {id: 2, status: 1}, {id: 3, status: 2}, {id: 4}}, page: []int64{4}},
	{name: "only an unordered unsent row behind a sent row",
		rows: []checkFixture{{id: 1, tag: "close-check"}, {id: 2, status: 2}, {id: 3}}, page: []int64{3}},
	{name: "another topic's unsent row behind a sent row",
		rows: []checkFixture{{id: 1, topic: "payments"}, {id: 2, status: 2}, {id: 3}}, page: []int64{3}},
	{name: "a late row behind unordered sent rows behind a sent row",
		rows: append([]checkFixture{{id: 1}, {id: 2, status: 2}}, func() []checkFixture {
			var fs []checkFixture
			for id := int64(3); id <= 60; id++ {
				fs = append(fs, checkFixture{id: id, tag: "close-check", status: 2})
			}
			return append(fs, checkFixture{id: 61})
		}()...), page: []int64{61}},
	{name: "an unsent row above a sent row above a late one",
		rows: []checkFixture{{id: 1, status: 1, parked: true}, {id: 2, status: 2}, {id: 3, status: 1, parked: true}, {id: 4}}, page: []int64{4}, head: 3},
	{name: "a requeued dead row behind sent rows, both in the page",
		rows: []checkFixture{{id: 1}, {id: 2, status: 2}, {id: 3, status: 2}, {id: 4}}, page: []int64{1, 4}},
	{name: "an unsent row between the page's rows of the key",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2}, {id: 3, status: 1}, {id: 4}}, page: []int64{2, 4}, head: 3},
	{name: "a late row between the page's rows of the key, below a sent one",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2}, {id: 3, status: 1, parked: true}, {id: 4, status: 2}, {id: 5}}, page: []int64{2, 5}},
	{name: "unsent rows between the page's rows of the key, above a sent one",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2}, {id: 3, status: 2}, {id: 4, status: 1}, {id: 5}, {id: 6}}, page: []int64{2, 6}, head: 4},
	{name: "rows of other streams between the page's rows of the key",
		rows: []checkFixture{{id: 1, status: 2}, {id: 2}, {id: 3, topic: "payments"}, {id: 4, tag: "close-check"}, {id: 5, status: 3}, {id: 6, deleted: true}, {id: 7}},
		page: []int64{2, 7}},
}

// TestOrderedCheckReadsTheNearestDecidingRow runs checkCases on the contract's table and on
// one with the previous (sharding_key, status, id) index only: both decide every case alike.
func TestOrderedCheckReadsTheNearestDecidingRow(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"contract", "previous"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
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
			const far = int64(1) << 50
			for n, c := range checkCases {
				key := fmt.Sprintf("order-%d", n)
				for _, f := range c.rows {
					topic, next := "orders", int64(0)
					if f.topic != "" {
						topic = f.topic
					}
					if f.parked {
						next = far
					}
					rowKey := key
					if f.upper {
						rowKey = strings.ToUpper(key)
					}
					// Ids per case apart, a row of another key between each.
					id := int64(n)*1000 + f.id*2
					if _, err := db.Exec(`INSERT INTO local_message (id, msg_id, topic, tag, content, status, sharding_key, next_retry_time, is_deleted)
						VALUES (?, ?, ?, ?, 'x', ?, ?, ?, ?), (?, ?, 'orders', '', 'x', 1, 'other', 0, 0)`,
						id, fmt.Sprintf("%s-%d", key, f.id), topic, f.tag, f.status, rowKey, next, f.deleted,
						id+1, fmt.Sprintf("%s-other-%d", key, f.id)); err != nil {
						t.Fatal(err)
					}
				}
			}
			s := testStore(db.DB)
			ordered := func(topic, tag string) bool { return tag != "close-check" }
			streams := map[OrderKey][]int64{}
			for n, c := range checkCases {
				var ids []int64
				for _, id := range c.page {
					ids = append(ids, int64(n)*1000+id*2)
				}
				streams[OrderKey{"orders", fmt.Sprintf("order-%d", n)}] = ids
			}
			heads, err := s.OrderedHeads(ctx, streams, ordered) // all cases in one page
			if err != nil {
				t.Fatal(err)
			}
			for n, c := range checkCases {
				want := c.head
				var got int64
				if h, ok := heads[OrderKey{"orders", fmt.Sprintf("order-%d", n)}]; ok {
					got = (h.ID - int64(n)*1000) / 2
					if c.rows[0].parked && h.DueMs != far {
						t.Errorf("%s: held behind row %d due at %d, want the parked time", c.name, got, h.DueMs)
					}
				}
				if got != want {
					t.Errorf("%s: held behind row %d, want %d (0: not held)", c.name, got, want)
				}
			}
		})
	}
}

// A relay running while migrate swaps the ordered check's index starts reading the new one
// at once (the index it forced is gone; a table without either is looked at again a minute
// after it found none); one whose index is dropped fails one check, then reads unforced.
func TestOrderedCheckFollowsTheTablesIndex(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ALTER TABLE local_message DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO local_message (id, msg_id, topic, content, status, sharding_key) VALUES
		(1, 'a', 'orders', 'x', 1, 'order-1'), (2, 'b', 'orders', 'x', 0, 'order-1')`); err != nil {
		t.Fatal(err)
	}
	s := testStore(db.DB)
	k := OrderKey{"orders", "order-1"}
	check := func(step string, wantHint bool) {
		t.Helper()
		heads, err := s.OrderedHeads(ctx, map[OrderKey][]int64{k: {2}}, func(string, string) bool { return true })
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if h := heads[k]; h.ID != 1 {
			t.Fatalf("%s: row 2 held behind %d, want 1", step, h.ID)
		}
		if got := s.checkHint != ""; got != wantHint {
			t.Fatalf("%s: reading on (sharding_key, id) %v, want %v", step, got, wantHint)
		}
	}
	check("previous layout", false)
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	check("migrated: the previous index swapped for the new one", true)
	s.checkLooked = s.checkLooked.Add(-2 * time.Minute)
	check("migrated, a minute later", true)
	if _, err := db.Exec("ALTER TABLE local_message DROP INDEX idx_sharding_id"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OrderedHeads(ctx, map[OrderKey][]int64{k: {2}}, func(string, string) bool { return true }); err == nil {
		t.Fatal("the check on a dropped index succeeded")
	}
	check("index dropped", false)
}

// testStore returns the Store a relay of the table local_message would use.
func testStore(db *sql.DB) *Store {
	return &Store{DB: db, Table: schema.QuoteIdent("local_message"), Name: "local_message", Timeout: 10 * time.Second}
}
