// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestOrderFollowsIDAmongCommittedRows checks per-key order exactly as docs/decisions.md
// states it ("Ordered routes, stated exactly"): among committed rows of a key, delivery
// follows id; a row committed after a higher id was sent (late) follows it; and writers that
// serialise per entity (a row lock on the entity in the outbox transaction) get their events
// in the order they produced them.
func TestOrderFollowsIDAmongCommittedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	run(t, b.newRelay(t, orderedEventsConfig(t, b)))

	// A lower id committed late follows the higher id sent meanwhile.
	late := writeLatePair(t, b)
	defer late.Rollback()
	eventually(t, 30*time.Second, "the committed row sent though a lower id of its key is open", func() bool {
		return countWhere(t, b.db.DB, "msg_id = 'late-2' AND status = 2") == 1
	})
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the late row sent", func() bool {
		return countWhere(t, b.db.DB, "msg_id = 'late-1' AND status = 2") == 1
	})
	var got []string
	for _, m := range b.broker.Messages("order-events") {
		if m.Properties["SHARDING_KEY"] == "SN-late" {
			got = append(got, m.Properties[outbox.MsgIDProperty])
		}
	}
	if fmt.Sprint(got) != "[late-2 late-1]" {
		t.Fatalf("delivery of SN-late: %v, want [late-2 late-1] (commit order, not id order)", got)
	}

	// Writers that lock the entity in the outbox transaction: per-entity production order.
	if _, err := b.db.Exec("CREATE TABLE orders (sn VARCHAR(32) PRIMARY KEY, seq INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	const entities, writers, perWriter = 5, 6, 40
	for e := 0; e < entities; e++ {
		if _, err := b.db.Exec("INSERT INTO orders VALUES (?, 0)", fmt.Sprintf("SN-%d", e)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				sn := fmt.Sprintf("SN-%d", (w+i)%entities)
				if err := produceEvent(ctx, b, sn); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "every event sent", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == writers*perWriter+2
	})
	seqs := map[string][]int{}
	for _, m := range b.broker.Messages("order-events") {
		key := m.Properties["SHARDING_KEY"]
		if key == "SN-late" {
			continue
		}
		n, _ := strconv.Atoi(string(m.Body))
		seqs[key] = append(seqs[key], n)
	}
	for key, seq := range seqs {
		for i, n := range seq {
			if n != i+1 {
				t.Fatalf("events of %s delivered as %v, want 1, 2, 3, ... in production order", key, seq)
			}
		}
	}
}

// produceEvent is an order service's transaction: lock the order, advance it, and write its
// event to the outbox, all committed together.
func produceEvent(ctx context.Context, b *bundle, sn string) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var seq int
	if err := tx.QueryRowContext(ctx, "SELECT seq FROM orders WHERE sn = ? FOR UPDATE", sn).Scan(&seq); err != nil {
		return err
	}
	seq++
	if _, err := tx.ExecContext(ctx, "UPDATE orders SET seq = ? WHERE sn = ?", seq, sn); err != nil {
		return err
	}
	if err := b.writer.Insert(ctx, tx, &outbox.Message{Topic: "order-events", ShardingKey: sn, Body: []byte(strconv.Itoa(seq))}); err != nil {
		return err
	}
	return tx.Commit()
}

// TestLateRowHoldsNothingBehindIt checks the late-commit rule of docs/decisions.md ("Ordered
// routes, stated exactly") on the contract's table and on one with the previous
// (sharding_key, status, id) index, alike: a row committed after a higher id of its key was
// sent, and waiting for its retry, does not hold the key's next row, which goes first.
func TestLateRowHoldsNothingBehindIt(t *testing.T) {
	t.Parallel()
	for _, layout := range []string{"contract", "previous"} {
		t.Run(layout, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if layout == "previous" {
				if _, err := b.db.Exec("ALTER TABLE local_message DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"); err != nil {
					t.Fatal(err)
				}
			}
			if got := lateRowDelivery(t, b); got != "[late-2 next-3 late-1]" {
				t.Fatalf("delivery of SN-late: %v, want [late-2 next-3 late-1] (the late row holds nothing behind it)", got)
			}
		})
	}
}

// lateRowDelivery makes a key's row late-1 late (late-2 sent while late-1's transaction is
// open), has the broker refuse its first send, writes the key's next row next-3, makes
// late-1's retry due, and returns the key's messages in the order the broker stored them.
func lateRowDelivery(t *testing.T, b *bundle) string {
	ctx := context.Background()
	cfg := orderedEventsConfig(t, b)
	cfg.Backoff = backoff.Policy{Base: time.Hour, Multiplier: 2, Max: time.Hour} // no retry on its own
	r := b.newRelay(t, cfg)
	drain := func(want string) {
		t.Helper()
		if _, err := r.DrainOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if n := countWhere(t, b.db.DB, want); n != 1 {
			t.Fatalf("after a pass, no row %s (%s)", want, statusCounts(t, b.db.DB))
		}
	}
	late := writeLatePair(t, b)
	defer late.Rollback()
	drain("msg_id = 'late-2' AND status = 2")
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	b.broker.SetTopicFaults("order-events", rmqtest.Faults{ErrorRate: 1})
	drain("msg_id = 'late-1' AND status = 1")
	b.broker.ClearFaults()
	b.insert(t, outbox.Message{MsgID: "next-3", Topic: "order-events", ShardingKey: "SN-late", Body: []byte("3")})
	drain("msg_id = 'next-3' AND status = 2")
	if _, err := b.db.Exec("UPDATE local_message SET next_retry_time = 0 WHERE msg_id = 'late-1'"); err != nil { // its retry comes due
		t.Fatal(err)
	}
	drain("msg_id = 'late-1' AND status = 2")
	var got []string
	for _, m := range b.broker.Messages("order-events") {
		got = append(got, m.Properties[outbox.MsgIDProperty])
	}
	return fmt.Sprint(got)
}

// orderedEventsConfig is b's relay configuration with the topic order-events on an ordered
// route.
func orderedEventsConfig(t *testing.T, b *bundle) relay.Config {
	t.Helper()
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Router = router
	return cfg
}

// writeLatePair inserts the key SN-late's row late-1 in a transaction it leaves open and
// returns, then commits the key's row late-2 (a higher id).
func writeLatePair(t *testing.T, b *bundle) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	late, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.writer.Insert(ctx, late, &outbox.Message{MsgID: "late-1", Topic: "order-events", ShardingKey: "SN-late", Body: []byte("first inserted")}); err != nil {
		late.Rollback()
		t.Fatal(err)
	}
	b.insert(t, outbox.Message{MsgID: "late-2", Topic: "order-events", ShardingKey: "SN-late", Body: []byte("second inserted")})
	return late
}
