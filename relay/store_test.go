package relay

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestPageExaminesOnlyItsOwnRows guards the scan's cost: a page resuming after many rows held
// back earlier in the pass (same next_retry_time, lower ids) must not re-read them. It counts
// the index entries the server examined for one page.
func TestPageExaminesOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	const rows, held, limit = 6000, 5000, 100
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
	if _, err := db.Exec("FLUSH STATUS"); err != nil {
		t.Fatal(err)
	}
	page, _, _, err := r.readPage(ctx, 0, 1<<62, cursor{next: 0, id: held}, limit)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != limit || page[0].id != held+1 {
		t.Fatalf("page has %d rows starting at id %d, want %d from %d", len(page), page[0].id, limit, held+1)
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
		t.Fatalf("one page of %d examined %d index entries: it re-reads the %d rows before the cursor", limit, examined, held)
	}
}

// nopPublisher is a Publisher for tests that only read pages.
type nopPublisher struct{}

func (nopPublisher) Send(context.Context, Route, ...*Message) error { return nil }
func (nopPublisher) Close() error                                   { return nil }
