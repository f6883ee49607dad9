package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// runGroup starts g.Run and returns a stop that ends it (leaving the group) and waits.
func runGroup(t *testing.T, g *relay.Group) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Group.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// coverage reports whether the groups' owned partitions are 0..n-1, each exactly once.
func coverage(groups []*relay.Group, n int) (bool, string) {
	seen := map[int]int{}
	desc := ""
	for i, g := range groups {
		owned := g.Owned()
		desc += fmt.Sprintf("relay %d: %v; ", i, owned)
		for _, p := range owned {
			seen[p]++
		}
	}
	if len(seen) != n {
		return false, desc
	}
	for _, c := range seen {
		if c != 1 {
			return false, desc
		}
	}
	return true, desc
}

// TestGroupSharesPartitionsAndKeepsKeyOrder: three relays share a table of 8 partitions
// while writers commit ordered events for 40 keys. At steady state every partition is held
// by exactly one relay and each holds 2 or 3; one relay leaves and the other two take its
// partitions; a fourth joins and gets its share. Every row is delivered, none dead, and
// each key's events reach the broker in the order they were written, across every handover.
func TestGroupSharesPartitionsAndKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	const parts = 8
	b := setup(t)
	ctx := context.Background()
	if err := schema.MigratePartitioned(ctx, b.db.DB, "local_message", parts); err != nil {
		t.Fatal(err)
	}
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Router = router
	cfg.Partitions = parts
	cfg.LockTTL = time.Second
	newGroup := func() *relay.Group {
		g, err := relay.NewGroup(b.db.DB, b.rdb, b.pub, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	groups := []*relay.Group{newGroup(), newGroup(), newGroup()}
	var stops []func()
	for _, g := range groups {
		stops = append(stops, runGroup(t, g))
	}

	// Writers: one event after another per key, as an order's lifecycle is written.
	const keys = 40
	wctx, stopWriters := context.WithCancel(ctx)
	var written sync.WaitGroup
	var total sync.Map
	for w := 0; w < 4; w++ {
		written.Add(1)
		go func() {
			defer written.Done()
			for seq := 0; wctx.Err() == nil; seq++ {
				for k := w; k < keys; k += 4 {
					key := fmt.Sprintf("SN%03d", k)
					b.insert(t, outbox.Message{MsgID: fmt.Sprintf("%s-%06d", key, seq), Topic: "order-events",
						ShardingKey: key, Body: []byte(strconv.Itoa(seq))})
				}
				total.Store(w, seq+1)
			}
		}()
	}

	steady := func(gs []*relay.Group, what string) {
		t.Helper()
		var desc string
		eventually(t, 30*time.Second, what, func() bool {
			var ok bool
			ok, desc = coverage(gs, parts)
			if ok {
				for _, g := range gs {
					if n := len(g.Owned()); n < parts/len(gs) || n > parts/len(gs)+1 {
						return false
					}
				}
			}
			return ok
		})
		t.Logf("%s: %s", what, desc)
	}
	steady(groups, "three relays holding every partition once")
	eventually(t, 30*time.Second, "rows delivered by three relays", func() bool { return countWhere(t, b.db.DB, "status = 2") >= 400 })

	stops[2]() // leaves the group: the others take its partitions
	steady(groups[:2], "two relays holding every partition once after one left")
	sentBefore := countWhere(t, b.db.DB, "status = 2")
	eventually(t, 30*time.Second, "rows delivered by two relays", func() bool { return countWhere(t, b.db.DB, "status = 2") >= sentBefore+400 })

	joined := newGroup()
	runGroup(t, joined)
	steady([]*relay.Group{groups[0], groups[1], joined}, "three relays again after one joined")
	sentBefore = countWhere(t, b.db.DB, "status = 2")
	eventually(t, 30*time.Second, "rows delivered after the join", func() bool { return countWhere(t, b.db.DB, "status = 2") >= sentBefore+400 })

	stopWriters()
	written.Wait()
	rows := countWhere(t, b.db.DB, "1 = 1")
	eventually(t, 60*time.Second, "every row sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == rows })
	if n := countWhere(t, b.db.DB, "status = 3"); n > 0 {
		t.Fatalf("%d rows dead", n)
	}
	// Per-key order on the broker: the first delivery of each event follows the key's sequence.
	last := map[string]int{}
	delivered := map[string]bool{}
	msgs := b.broker.Messages("order-events")
	for _, m := range msgs {
		id := m.Properties[outbox.MsgIDProperty]
		if delivered[id] {
			continue // a redelivery after a handover; the consumer's dedupe absorbs it
		}
		delivered[id] = true
		key := m.Properties["SHARDING_KEY"]
		seq, _ := strconv.Atoi(string(m.Body))
		if prev, ok := last[key]; ok && seq != prev+1 {
			t.Fatalf("key %s: event %d delivered after %d", key, seq, prev)
		}
		if _, ok := last[key]; !ok && seq != 0 {
			t.Fatalf("key %s: first event delivered is %d", key, seq)
		}
		last[key] = seq
	}
	if len(delivered) != rows {
		t.Fatalf("%d distinct messages on the broker, want %d", len(delivered), rows)
	}
	t.Logf("%d rows over %d keys delivered in key order; %d sends in all (redeliveries: %d)", rows, len(last), len(msgs), len(msgs)-rows)
}

// TestGroupWithAnotherPartitionCountHoldsNothing: a relay started with another
// relay.partitions than the running group's holds no partition (it would split the rows two
// ways and publish some twice), and the group keeps delivering; once the group's relays are
// gone, the newcomer's number is the group's and it takes over.
func TestGroupWithAnotherPartitionCountHoldsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if err := schema.MigratePartitioned(context.Background(), b.db.DB, "local_message", 4); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.LockTTL = time.Second
	cfg.Partitions = 4
	old, err := relay.NewGroup(b.db.DB, b.rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopOld := runGroup(t, old)
	eventually(t, 30*time.Second, "the group to hold its 4 partitions", func() bool { return len(old.Owned()) == 4 })

	cfg.Partitions = 1
	newcomer, err := relay.NewGroup(b.db.DB, b.rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, newcomer)
	eventually(t, 30*time.Second, "both relays to see each other", func() bool { return newcomer.Members() == 2 && old.Members() == 2 })
	for i := 0; i < 20; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("m%02d", i), Topic: "orders", Body: []byte("x")})
	}
	eventually(t, 30*time.Second, "the group to deliver beside the newcomer", func() bool { return countWhere(t, b.db.DB, "status = 2") == 20 })
	if len(newcomer.Owned()) != 0 || len(old.Owned()) != 4 {
		t.Fatalf("with a newcomer of another partition count: group holds %v, newcomer %v", old.Owned(), newcomer.Owned())
	}
	stopOld()
	eventually(t, 30*time.Second, "the newcomer to take the table once the group is gone", func() bool { return len(newcomer.Owned()) == 1 })
}

// TestIdleLeaderWithLongPollIntervalKeepsItsLock: an idle leader whose poll interval is longer
// than its stall timeout still hears from the database often enough not to take itself for
// stalled: it keeps the lock the whole time and finds a row written without a nudge.
func TestIdleLeaderWithLongPollIntervalKeepsItsLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.PollInterval = time.Hour
	cfg.StallTimeout = 600 * time.Millisecond
	cfg.LockTTL = 200 * time.Millisecond
	cfg.DisableNudge = true
	r := b.newRelay(t, cfg)
	run(t, r)
	eventually(t, 30*time.Second, "the relay to lead", func() bool { return r.Health().Leader })
	idleUntil := time.Now().Add(5 * cfg.StallTimeout)
	eventually(t, 30*time.Second, "five stall timeouts of idleness", func() bool {
		if !r.Health().Leader {
			t.Fatal("the idle leader gave its lock up")
		}
		return time.Now().After(idleUntil)
	})
	b.insert(t, outbox.Message{MsgID: "quiet", Topic: "orders", Body: []byte("x")})
	eventually(t, 30*time.Second, "the row sent without a nudge", func() bool {
		if !r.Health().Leader {
			t.Fatal("the idle leader gave its lock up")
		}
		return countWhere(t, b.db.DB, "status = 2") == 1
	})
}

// TestKeyedNudgesWakeTheirPartitions: a group of 4 partitions that never polls (poll
// interval and stall timeout of an hour) delivers rows only when nudged. A nudge naming its
// rows (Writer.NudgeFor) wakes the right partitions, and a plain one wakes them all.
func TestKeyedNudgesWakeTheirPartitions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := schema.MigratePartitioned(ctx, b.db.DB, "local_message", 4); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Partitions = 4
	cfg.LockTTL = time.Second
	cfg.PollInterval, cfg.MinPollInterval, cfg.StallTimeout = time.Hour, time.Hour, time.Hour
	g, err := relay.NewGroup(b.db.DB, b.rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, g)
	eventually(t, 30*time.Second, "the relay to hold its 4 partitions", func() bool { return len(g.Owned()) == 4 })
	commit := func(msgs ...*outbox.Message) {
		t.Helper()
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := b.writer.Insert(ctx, tx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// One row at a time, so that a nudge waking the wrong partition leaves it unsent.
	for i := 0; i < 8; i++ {
		m := &outbox.Message{Topic: "orders", ShardingKey: fmt.Sprintf("order-%d", i), Body: []byte("x")}
		commit(m)
		if err := b.writer.NudgeFor(ctx, m); err != nil {
			t.Fatal(err)
		}
		eventually(t, 30*time.Second, "the row sent after a nudge naming it", func() bool {
			return countWhere(t, b.db.DB, "status = 2") == i+1
		})
	}
	commit(&outbox.Message{Topic: "orders", Body: []byte("y")})
	if err := b.writer.Nudge(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the row sent after a plain nudge", func() bool { return countWhere(t, b.db.DB, "status = 2") == 9 })
}

// TestPartitionThatFoundRowsWakesItsSiblings: in a group that never polls, a row of one
// partition committed without a nudge is sent once another partition of the same process
// finds rows (here: through a nudge naming only that other row).
func TestPartitionThatFoundRowsWakesItsSiblings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if err := schema.MigratePartitioned(ctx, b.db.DB, "local_message", 4); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Partitions = 4
	cfg.LockTTL = time.Second
	cfg.PollInterval, cfg.MinPollInterval, cfg.StallTimeout = time.Hour, time.Hour, time.Hour
	g, err := relay.NewGroup(b.db.DB, b.rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, g)
	eventually(t, 30*time.Second, "the relay to hold its 4 partitions", func() bool { return len(g.Owned()) == 4 })
	// Two keys in different partitions.
	keyIn := map[uint32]string{}
	for i := 0; len(keyIn) < 2; i++ {
		k := fmt.Sprintf("order-%d", i)
		keyIn[outbox.PartitionHash(k, "")%4] = k
	}
	var keys []string
	for _, k := range keyIn {
		keys = append(keys, k)
	}
	quiet := &outbox.Message{Topic: "orders", ShardingKey: keys[0], Body: []byte("committed, never nudged")}
	loud := &outbox.Message{Topic: "orders", ShardingKey: keys[1], Body: []byte("nudged")}
	b.insert(t, *quiet)
	b.insert(t, *loud)
	if err := b.writer.NudgeFor(ctx, loud); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "both rows sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == 2 })
}
