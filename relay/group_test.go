// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// runGroup starts g.Run and returns a stop that ends it (leaving the group) and waits.
func runGroup(t testing.TB, g *relay.Group) (stop func()) {
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

// migrate makes the bundle's table one of parts partitions.
func (b *bundle) migrate(t testing.TB, parts int) {
	t.Helper()
	if err := schema.MigratePartitioned(context.Background(), b.db.DB, "local_message", parts); err != nil {
		t.Fatal(err)
	}
}

// newGroup returns the group of the bundle's table with cfg.
func (b *bundle) newGroup(t testing.TB, cfg relay.Config) *relay.Group {
	t.Helper()
	g, err := relay.NewGroup(b.db.DB, b.rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// silentGroup runs a group of 4 partitions that never polls (poll interval and stall
// timeout of an hour): only nudges and its partitions' wakes make it look for rows. It
// returns once the group holds every partition, so the first passes are done.
func (b *bundle) silentGroup(t *testing.T) *relay.Group {
	t.Helper()
	b.migrate(t, 4)
	cfg := b.config()
	cfg.Partitions = 4
	cfg.LockTTL = time.Second
	cfg.PollInterval, cfg.MinPollInterval, cfg.StallTimeout = time.Hour, time.Hour, time.Hour
	g := b.newGroup(t, cfg)
	runGroup(t, g)
	eventually(t, 30*time.Second, "the relay to hold its 4 partitions", func() bool { return len(g.Owned()) == 4 })
	return g
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
// partitions; a fourth joins and gets its share. The broker drops connections all along.
// Every row is delivered, none dead, and each key's events reach the broker in the order
// they were written, across every handover.
func TestGroupSharesPartitionsAndKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	const parts = 8
	b := setup(t)
	b.migrate(t, parts)
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Router = router
	cfg.Partitions = parts
	cfg.LockTTL = time.Second
	// The broker drops connections throughout, before and after storing (lost acks): a
	// dropped connection fails every send in flight on it.
	b.broker.SetFaults(rmqtest.Faults{DropBeforeStore: 0.03, DropAfterStore: 0.03})
	groups := []*relay.Group{b.newGroup(t, cfg), b.newGroup(t, cfg), b.newGroup(t, cfg)}
	var stops []func()
	for _, g := range groups {
		stops = append(stops, runGroup(t, g))
	}

	// Writers: one event after another per key, as an order's lifecycle is written, 80 a
	// second in all. Unpaced they would outrun the relays, whose ordered throughput under
	// these faults is measured by BenchmarkOrderedUnderDroppedConnections.
	const keys = 40
	wctx, stopWriters := context.WithCancel(context.Background())
	var written sync.WaitGroup
	for w := 0; w < 4; w++ {
		written.Add(1)
		go func() {
			defer written.Done()
			pace := time.NewTicker(500 * time.Millisecond)
			defer pace.Stop()
			for seq := 0; wctx.Err() == nil; seq++ {
				select {
				case <-wctx.Done():
					return
				case <-pace.C:
				}
				for k := w; k < keys; k += 4 {
					key := fmt.Sprintf("SN%03d", k)
					err := b.writer.InsertNoTx(context.Background(), b.db.DB, []outbox.Message{{MsgID: fmt.Sprintf("%s-%06d", key, seq),
						Topic: "order-events", ShardingKey: key, Body: []byte(strconv.Itoa(seq))}})
					if err != nil {
						t.Error(err) // not Fatal: this is not the test's goroutine
						return
					}
				}
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

	joined := b.newGroup(t, cfg)
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
	b.migrate(t, 4)
	cfg := b.config()
	cfg.LockTTL = time.Second
	cfg.Partitions = 4
	old := b.newGroup(t, cfg)
	stopOld := runGroup(t, old)
	eventually(t, 30*time.Second, "the group to hold its 4 partitions", func() bool { return len(old.Owned()) == 4 })

	cfg.Partitions = 1
	newcomer := b.newGroup(t, cfg)
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
		if h := r.Health(); !h.Leader {
			t.Fatalf("the idle leader gave its lock up: %+v", h)
		}
		return time.Now().After(idleUntil)
	})
	b.insert(t, outbox.Message{MsgID: "quiet", Topic: "orders", Body: []byte("x")})
	eventually(t, 30*time.Second, "the row sent without a nudge", func() bool {
		if h := r.Health(); !h.Leader {
			t.Fatalf("the idle leader gave its lock up: %+v", h)
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
	b.silentGroup(t)
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
	b.silentGroup(t)
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

// BenchmarkOrderedUnderDroppedConnections drains 40 ordered keys × 30 events, with one
// relay on the whole table and one relay holding 8 partitions, first on a healthy broker
// (drops=0) and then with the broker dropping 3 % of the connections before storing and 3 %
// after (lost acks), and reports rows/s of each, so that one run gives the ratio. The
// credentials=acl runs do the same against a broker that checks every request's ACL
// signature, with a publisher given credentials (the client then installs its signer):
//
//	go test -run '^$' -bench OrderedUnderDroppedConnections -benchtime 1x ./relay/
func BenchmarkOrderedUnderDroppedConnections(b *testing.B) {
	for _, creds := range []map[string]string{nil, {"relay-ak": "relay-sk"}} {
		for _, parts := range []int{1, 8} {
			for _, drops := range []float64{0, 0.03} {
				name := fmt.Sprintf("partitions=%d/drops=%g", parts, drops)
				if creds != nil {
					name += "/credentials=acl"
				}
				b.Run(name, func(b *testing.B) { benchOrderedUnderDrops(b, parts, drops, creds) })
			}
		}
	}
}

// benchOrderedUnderDrops is one run of BenchmarkOrderedUnderDroppedConnections.
func benchOrderedUnderDrops(b *testing.B, parts int, drops float64, creds map[string]string) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		bu := setupWith(b, rmqtest.Options{Credentials: creds})
		bu.migrate(b, parts)
		router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}})
		if err != nil {
			b.Fatal(err)
		}
		cfg := bu.config()
		cfg.Router, cfg.Partitions, cfg.LockTTL = router, parts, time.Second
		const keys, events = 40, 30
		for seq := 0; seq < events; seq++ {
			msgs := make([]outbox.Message, keys)
			for k := range msgs {
				key := fmt.Sprintf("SN%03d", k)
				msgs[k] = outbox.Message{MsgID: fmt.Sprintf("%s-%06d", key, seq), Topic: "order-events", ShardingKey: key, Body: []byte("x")}
			}
			bu.insert(b, msgs...)
		}
		bu.broker.SetFaults(rmqtest.Faults{DropBeforeStore: drops, DropAfterStore: drops})
		// The application's writers commit and hold transactions open beside it;
		// their rows (topic orders) go through the same relay and the same drops.
		stopWriters := busyWriters(b, bu)
		b.StartTimer()
		start := time.Now()
		stop := runGroup(b, bu.newGroup(b, cfg))
		eventually(b, 5*time.Minute, "every ordered row sent", func() bool {
			return countWhere(b, bu.db.DB, "topic = 'order-events' AND status = 2") == keys*events
		})
		b.ReportMetric(float64(keys*events)/time.Since(start).Seconds(), "rows/s")
		b.StopTimer()
		stopWriters()
		stop()
		if n := bu.broker.ACLRefusals(); n != 0 {
			b.Fatalf("%d requests refused for their ACL signature", n)
		}
	}
}

// TestNewLayoutWaitsForTheOldLayoutsLocks: relays with relay.partitions = 2 hold the table;
// relays with 4 start beside them (a change of relay.partitions being rolled out). One old
// relay then loses Redis for longer than the group's membership lasts: it drops out of the
// members while it still holds its locks. The new relays must not lead any partition until
// the old relay's locks have run out: at no moment do an old and a new relay lead at once.
func TestNewLayoutWaitsForTheOldLayoutsLocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.migrate(t, 2)
	proxy, oldRdb := b.redisThroughProxy(t, 100*time.Millisecond)

	cfg := b.config()
	cfg.LockTTL = time.Second
	cfg.Partitions = 2
	oldGroup, err := relay.NewGroup(b.db.DB, oldRdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, oldGroup)
	leading := func(g *relay.Group) int {
		n := 0
		for _, r := range g.Relays() {
			if r.Health().Leader {
				n++
			}
		}
		return n
	}
	eventually(t, 30*time.Second, "the old relay leading both partitions", func() bool { return leading(oldGroup) == 2 })
	cfg.Partitions = 4
	newGroup := b.newGroup(t, cfg)
	runGroup(t, newGroup)

	check := func(what string, until func() bool, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for !until() {
			if o, n := leading(oldGroup), leading(newGroup); o > 0 && n > 0 {
				t.Fatalf("%s: the old layout leads %d partitions and the new one %d at once", what, o, n)
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out after %s waiting for %s", within, what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// The new relays join and wait (the old member is the oldest of the group).
	joined := time.Now().Add(3 * cfg.LockTTL)
	check("the new relays waiting beside the old", func() bool { return time.Now().After(joined) }, 10*time.Second)
	proxy.Freeze()
	check("the old relay's locks running out", func() bool { return leading(oldGroup) == 0 }, 30*time.Second)
	check("the new relays taking the table over", func() bool { return leading(newGroup) == 4 }, 30*time.Second)
	proxy.Thaw()
}
