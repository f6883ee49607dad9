// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/relay"
)

const haTopic = "ha-orders"

func init() { redistest.QuietClient() }

// openConn is redistest.Open.
var openConn = redistest.Open

// leaderAndStandby starts two relays of cfg on the Redis set-up the configuration keys
// describe, each with a connection of its own as two processes would have; the first leads
// before the second starts.
func leaderAndStandby(t *testing.T, b *bundle, cfg relay.Config, keys map[string]any) (leader, standby *relay.Relay) {
	t.Helper()
	start := func() *relay.Relay {
		conn := openConn(t, keys)
		c := cfg
		c.LockClients = conn.Redlock
		r, err := relay.New(b.db.DB, conn.Client, b.pub, c)
		if err != nil {
			t.Fatal(err)
		}
		run(t, r)
		return r
	}
	leader = start()
	eventually(t, 10*time.Second, "the first relay to lead", func() bool { return leader.Health().Leader })
	return leader, start()
}

// leaderWatch samples which of relays lead every few milliseconds, and records the longest
// time none did and whether two ever did at once.
type leaderWatch struct {
	mu          sync.Mutex
	longestGap  time.Duration
	gapStart    time.Time
	bothLeading int
	stop        chan struct{}
	done        chan struct{}
}

func watchLeaders(relays ...*relay.Relay) *leaderWatch {
	w := &leaderWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-t.C:
			}
			n := 0
			for _, r := range relays {
				if r.Health().Leader {
					n++
				}
			}
			now := time.Now()
			w.mu.Lock()
			switch {
			case n == 0 && w.gapStart.IsZero():
				w.gapStart = now
			case n > 0 && !w.gapStart.IsZero():
				w.longestGap = max(w.longestGap, now.Sub(w.gapStart))
				w.gapStart = time.Time{}
			}
			if n > 1 {
				w.bothLeading++
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *leaderWatch) finish() (longestGap time.Duration, samplesBoth int) {
	close(w.stop)
	<-w.done
	return w.longestGap, w.bothLeading
}

// haWriter inserts one row at a time and nudges, through its own Redis client, until
// stopped; it returns the msg_ids it committed.
func haWriter(t *testing.T, b *bundle, nudges redis.UniversalClient, prefix string) (stop func() []string) {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(nudges)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
			}
			id := fmt.Sprintf("%s-%05d", prefix, i)
			if err := w.InsertNoTx(context.Background(), b.db.DB, []outbox.Message{{MsgID: id, Topic: haTopic, Tag: "created", Body: []byte(id)}}); err != nil {
				t.Errorf("insert %s: %v", id, err)
				return
			}
			ids = append(ids, id)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			_ = w.Nudge(ctx) // a hint: during the failover it fails, and the poll finds the row
			cancel()
		}
	}()
	return func() []string {
		close(quit)
		<-done
		return ids
	}
}

// assertDelivered checks that every id is marked sent and stored by the broker, and returns
// how many messages the broker holds twice (allowed: delivery is at least once).
func assertDelivered(t *testing.T, b *bundle, ids []string) (duplicates int) {
	t.Helper()
	eventually(t, 60*time.Second, "every committed row marked sent", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == len(ids)
	})
	if n := countWhere(t, b.db.DB, "1=1"); n != len(ids) {
		t.Fatalf("%d rows in the table, %d committed", n, len(ids))
	}
	seen := map[string]int{}
	for _, m := range b.broker.Messages(haTopic) {
		seen[m.Properties[outbox.MsgIDProperty]]++
	}
	for _, id := range ids {
		switch n := seen[id]; {
		case n == 0:
			t.Errorf("committed row %s marked sent but never delivered", id)
		case n > 1:
			duplicates += n - 1
		}
	}
	return duplicates
}

// The lock's Redis is a master with a replica under three Sentinels. The master is killed
// (-9) while a leader publishes and a standby waits; the Sentinels promote the replica, the
// relays' clients follow them, one relay leads through the new master, and every row
// committed before, during and after the failover is delivered and marked sent.
func TestSentinelFailoverOfTheLocksRedis(t *testing.T) {
	t.Parallel()
	b := setup(t)
	g := redistest.NewSentinelGroup(t, time.Second)
	keys := map[string]any{config.KeyRedisAddrs: g.SentinelAddrs(), config.KeyRedisMasterName: redistest.MasterName}
	cfg := b.config()
	cfg.LockTTL = 2 * time.Second // the product's default
	r1, r2 := leaderAndStandby(t, b, cfg, keys)

	stopWriting := haWriter(t, b, openConn(t, keys).Client, "sentinel")
	eventually(t, 20*time.Second, "rows delivered before the failover", func() bool {
		return countWhere(t, b.db.DB, "status = 2") >= 20
	})
	watch := watchLeaders(r1, r2)
	killed := time.Now()
	g.Master.Kill()
	ctx := context.Background()
	eventually(t, 60*time.Second, "the Sentinels to promote the replica", func() bool {
		a, err := g.MasterAddr(ctx)
		return err == nil && a == g.Replica.Addr
	})
	promoted := time.Since(killed)
	promotedAt := countWhere(t, b.db.DB, "1=1")
	eventually(t, 30*time.Second, "rows committed after the promotion to be sent", func() bool {
		return countWhere(t, b.db.DB, "status = 2") > promotedAt+20
	})
	ids := stopWriting()
	dups := assertDelivered(t, b, ids)
	gap, both := watch.finish()

	newMaster := g.Replica.Client()
	if n, err := newMaster.Exists(ctx, cfg.LockKey).Result(); err != nil || n != 1 {
		t.Fatalf("the lock is not held on the promoted replica (exists=%d, %v)", n, err)
	}
	if !r1.Health().Leader && !r2.Health().Leader {
		t.Fatal("no relay leads after the failover")
	}
	t.Logf("failover: promoted %.1fs after kill -9; longest time without a leader %.2fs; %d samples with two leaders; %d rows, %d duplicates",
		promoted.Seconds(), gap.Seconds(), both, len(ids), dups)
}

// The lock is held on a Redlock quorum of three independent masters. With one master killed
// the leader keeps its lock and keeps publishing; with a second killed no relay holds the
// lock, rows committed meanwhile stay due, and they are delivered once a master is back.
func TestRedlockQuorumOfThreeMasters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m := []*redistest.Proc{redistest.Server(t), redistest.Server(t), redistest.Server(t)}
	keys := map[string]any{
		config.KeyRedisAddr:        testenv.RedisAddr(), // nudges
		config.KeyLockRedlockAddrs: []string{m[0].Addr, m[1].Addr, m[2].Addr},
	}
	cfg := b.config()
	cfg.LockTTL = 2 * time.Second
	leader, standby := leaderAndStandby(t, b, cfg, keys)
	msgs := func(prefix string, n int) []outbox.Message {
		out := make([]outbox.Message, n)
		for i := range out {
			id := fmt.Sprintf("%s-%03d", prefix, i)
			out[i] = outbox.Message{MsgID: id, Topic: haTopic, Body: []byte(id)}
		}
		return out
	}
	var ids []string
	insert := func(prefix string, n int) {
		for _, msg := range msgs(prefix, n) {
			ids = append(ids, msg.MsgID)
		}
		b.insert(t, msgs(prefix, n)...)
	}
	insert("before", 50)
	eventually(t, 20*time.Second, "rows sent with three masters", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == 50
	})

	var lostLead atomic.Bool
	watchDone := make(chan struct{})
	stopWatch := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if !leader.Health().Leader || standby.Health().Leader {
				lostLead.Store(true)
			}
		}
	}()
	m[0].Kill()
	insert("one-down", 50)
	eventually(t, 20*time.Second, "rows sent with one master of three down", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == 100
	})
	close(stopWatch)
	<-watchDone
	if lostLead.Load() {
		t.Fatal("the leader lost its lead while two masters of three held its lock")
	}

	m[1].Kill()
	eventually(t, 3*cfg.LockTTL, "the leader to stop leading without a quorum", func() bool {
		return !leader.Health().Leader
	})
	sentBefore := b.broker.Count(haTopic)
	insert("no-quorum", 50)
	// Wait until both relays have tried for the lock for two TTLs and more without it.
	eventually(t, 30*time.Second, "both relays to wait two lock TTLs", func() bool {
		return leader.Health().LockWait > 2*cfg.LockTTL && standby.Health().LockWait > 2*cfg.LockTTL
	})
	if leader.Health().Leader || standby.Health().Leader {
		t.Fatal("a relay leads with two masters of three down")
	}
	if n := b.broker.Count(haTopic); n != sentBefore {
		t.Fatalf("%d messages published without a quorum", n-sentBefore)
	}
	if n := countWhere(t, b.db.DB, "status = 2"); n != 100 {
		t.Fatalf("%d rows sent, want the 100 sent before the quorum was lost", n)
	}

	m[1].Restart() // empty: the lock is taken afresh on a quorum
	dups := assertDelivered(t, b, ids)
	if dups != 0 {
		t.Errorf("%d duplicates; with at most one holder of a quorum there should be none", dups)
	}
}

// The lock's Redis is a Cluster of three masters: the lock (SET NX, extension and release
// scripts on one key) works, and writers' nudges reach the relay (PUBLISH travels the
// cluster bus to the node where the relay SUBSCRIBEd). The relay polls once an hour, so
// only a nudge can make it publish the second batch.
func TestClusterLockAndNudges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	nodes := redistest.NewCluster(t, 3)
	keys := map[string]any{config.KeyRedisAddrs: []string{nodes[0].Addr}, config.KeyRedisCluster: true}
	cfg := b.config()
	// An idle leader probes every poll interval, and at least twice per stall timeout: with
	// both in hours, only a nudge can make it publish within the test.
	cfg.PollInterval, cfg.MinPollInterval, cfg.StallTimeout = time.Hour, time.Hour, 2*time.Hour
	cfg.LockTTL = 2 * time.Second
	_, standby := leaderAndStandby(t, b, cfg, keys)
	conn := openConn(t, keys)
	ctx := context.Background()
	channel := outbox.NudgeChannel("local_message")
	eventually(t, 10*time.Second, "both relays to subscribe to the nudge channel", func() bool {
		n := int64(0)
		for _, p := range nodes {
			subs, err := p.Client().PubSubNumSub(ctx, channel).Result()
			if err != nil {
				return false
			}
			n += subs[channel]
		}
		return n == 2
	})
	if held, err := conn.ReadLock(ctx, cfg.LockKey); err != nil || !held.Held {
		t.Fatalf("status reads the lock in the Cluster: %+v, %v", held, err)
	}
	w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(openConn(t, keys).Client)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for batch := range 2 {
		var msgs []outbox.Message
		for i := range 20 {
			id := fmt.Sprintf("cluster-%d-%02d", batch, i)
			ids = append(ids, id)
			msgs = append(msgs, outbox.Message{MsgID: id, Topic: haTopic, Body: []byte(id)})
		}
		if err := w.InsertNoTx(ctx, b.db.DB, msgs); err != nil {
			t.Fatal(err)
		}
		if err := w.Nudge(ctx); err != nil {
			t.Fatalf("nudge through the Cluster: %v", err)
		}
		eventually(t, 30*time.Second, fmt.Sprintf("batch %d sent after its nudge", batch), func() bool {
			return countWhere(t, b.db.DB, "status = 2") == len(ids)
		})
	}
	if dups := assertDelivered(t, b, ids); dups != 0 {
		t.Errorf("%d duplicates with one leader", dups)
	}
	if standby.Health().Leader {
		t.Error("the standby took the lock from a leader that was never stopped")
	}
}
