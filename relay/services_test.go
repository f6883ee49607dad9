// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// relayCode marks the goroutines of package relay and of its internal packages (those run as
// services, internal/startstop, have the relay's function in their stacks; the publisher's
// own, relay/rocketmq, are the publisher's, started and stopped with it, not with Run).
var relayCode = []string{"outbox-relay/relay.", "outbox-relay/relay/internal/"}

func relayGoroutines() map[string]string { return testenv.Goroutines(relayCode...) }

// checkNoneLeft fails the test if goroutines of the relay's packages run now that did not
// before (ids of before).
func checkNoneLeft(t *testing.T, before map[string]string) {
	t.Helper()
	testenv.NoGoroutinesLeft(t, before, relayCode...)
}

// TestShutdownStopsEveryBackgroundService: once Run returns (a relay of its own, and a group
// of two partitions), nothing it started still runs: not the nudge listener, the backlog
// sampler, the lock keeper, the abort and handover watches, the check of the database, the
// completer, a late unit or the journal's appender (which appended every sent row's
// position before it ended). Each has been stopped, and waited for, before Run returned.
func TestShutdownStopsEveryBackgroundService(t *testing.T) {
	// Not parallel: the goroutines counted are every test's.
	for _, parts := range []int{1, 2} {
		t.Run(fmt.Sprintf("partitions=%d", parts), func(t *testing.T) {
			b := setup(t)
			cfg := b.config()
			cfg.Metrics = relay.NewMetrics(prometheus.NewRegistry()) // the backlog sampler runs
			cfg.LockTTL = time.Second                                // the keeper extends the lock and checks the database
			cfg.RecordPositions = true                               // the journal's appender runs
			var runner func(ctx context.Context) error
			lockKey := cfg.LockKey
			if parts > 1 {
				lockKey = relay.PartitionLockKey(cfg.LockKey, 0, parts)
				b.migrate(t, parts)
				cfg.Partitions = parts
				runner = b.newGroup(t, cfg).Run
			} else {
				runner = b.newRelay(t, cfg).Run
			}
			createJournal(t, b.db.DB)
			before := relayGoroutines()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- runner(ctx) }()
			var msgs []outbox.Message
			for i := range 20 {
				msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("svc-%02d", i), Topic: "services", Body: []byte("x")})
			}
			b.insert(t, msgs...)
			eventually(t, 30*time.Second, "every row sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == len(msgs) })
			// The keeper has extended the lock (and started a check of the database): its TTL
			// went up.
			last := time.Duration(-1)
			eventually(t, 10*time.Second, "an extension of the lock", func() bool {
				ttl := b.rdb.PTTL(context.Background(), lockKey).Val()
				extended := last > 0 && ttl > last
				last = ttl
				return extended
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkNoneLeft(t, before)
			// The appender, stopped last, appended what the write-backs left.
			if n := len(readJournal(t, b.db.DB)); n != len(msgs) {
				t.Fatalf("%d of the %d sent rows in the journal after Run", n, len(msgs))
			}
		})
	}
}

// TestRunWaitsForItsBackgroundServices: a standby's backlog sampler is held inside its read
// of the clock (the relay's own clock, injected) when Run's context ends. Run, a relay's and a
// group's, returns only once the sampler has ended: nothing of the relay is left running,
// reading the database or writing metrics, after Run returned.
func TestRunWaitsForItsBackgroundServices(t *testing.T) {
	// Not parallel: the goroutines counted are every test's.
	for _, group := range []bool{false, true} {
		t.Run(fmt.Sprintf("group=%v", group), func(t *testing.T) {
			b := setup(t)
			var hold atomic.Bool
			var held atomic.Int32
			release := make(chan struct{})
			cfg := relay.WithClock(b.config(), func() time.Time {
				if hold.Load() {
					held.Add(1)
					<-release
				}
				return time.Now()
			})
			cfg.Metrics = relay.NewMetrics(prometheus.NewRegistry()) // the backlog sampler runs
			// Another process holds the table's lock: the relay stands by, and only its
			// sampler reads the clock.
			if err := b.rdb.Set(context.Background(), cfg.LockKey, "another relay", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			runner := b.newRelay(t, cfg).Run
			if group {
				runner = b.newGroup(t, cfg).Run
			}
			before := relayGoroutines()
			hold.Store(true)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- runner(ctx) }()
			eventually(t, 10*time.Second, "the sampler reading the clock", func() bool { return held.Load() > 0 })
			cancel()
			// The sampler goes on once Run had ample time to return without it (which it must
			// not): not a synchronisation, the test passes however late this runs.
			go func() {
				time.Sleep(200 * time.Millisecond)
				close(release)
			}()
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkNoneLeft(t, before)
		})
	}
}

// TestRunReturnsOnceItsLateUnitsEnded: Run's context ends while a late unit (a send that
// outlasted its page: its broker answers 3 s late) is in flight. When Run returns, not
// after, no goroutine of the relay is left (checked once, not polled: "every goroutine it
// started has ended when it returns"), and the late unit's row is written back sent.
func TestRunReturnsOnceItsLateUnitsEnded(t *testing.T) {
	// Not parallel: the goroutines counted are every test's.
	b := setup(t)
	east, eastPub := secondBroker(t, 30*time.Second)
	east.SetFaults(rmqtest.Faults{Latency: 3 * time.Second})
	pub := &countingPublisher{Publisher: topicPublisher{"east": eastPub, "west": b.pub}, counts: map[string]int{}}
	b.insert(t, outbox.Message{MsgID: "slow", Topic: "east", Body: []byte("s")})
	for i := range 5 {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("w%02d", i), Topic: "west", Body: []byte("w")})
	}
	r, err := relay.New(b.db.DB, b.rdb, pub, b.config())
	if err != nil {
		t.Fatal(err)
	}
	before := relayGoroutines()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	// The page is done (the other broker's rows written back) while the slow send goes on.
	eventually(t, 30*time.Second, "the other broker's rows sent", func() bool {
		return countWhere(t, b.db.DB, "topic = 'west' AND status = 2") == 5
	})
	if countWhere(t, b.db.DB, "msg_id = 'slow' AND status = 0") != 1 || pub.count("slow") != 1 {
		t.Fatalf("the slow send is not in flight as a late unit (%s)", statusCounts(t, b.db.DB))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkNoneLeft(t, before)
	if n := countWhere(t, b.db.DB, "msg_id = 'slow' AND status = 2"); n != 1 {
		t.Fatalf("the late unit's row is not written back sent when Run returned (%s)", statusCounts(t, b.db.DB))
	}
}
