// SPDX-License-Identifier: Apache-2.0

package redisconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

func init() { redistest.QuietClient() }

// A Sentinel-configured client follows the master through a failover: writes that failed
// while the master was down succeed on the promoted replica, without a new client.
func TestSentinelClientFollowsFailover(t *testing.T) {
	t.Parallel()
	g := redistest.NewSentinelGroup(t, time.Second)
	conn := redistest.Open(t, map[string]any{
		config.KeyRedisAddrs: g.SentinelAddrs(), config.KeyRedisMasterName: redistest.MasterName,
	})
	ctx := context.Background()
	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.Client.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the write to reach the replica", func() bool {
		v, _ := g.Replica.Client().Get(ctx, "k").Result()
		return v == "before"
	})
	g.Master.Kill()
	testenv.Eventually(t, 30*time.Second, "a write through the promoted replica", func() bool {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		return conn.Client.Set(c, "k", "after", 0).Err() == nil
	})
	if v, err := g.Replica.Client().Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Fatalf("the promoted replica has k=%q (%v), want after", v, err)
	}
	if !strings.Contains(conn.String(), "sentinel master "+redistest.MasterName) {
		t.Fatalf("String() = %q", conn.String())
	}
}

// With Redlock, status reads the lock on every master: held when a majority holds it, an
// error when fewer than a majority answer; Ping passes with a minority down.
func TestRedlockReadLockAndPing(t *testing.T) {
	t.Parallel()
	m := []*redistest.Proc{redistest.Server(t), redistest.Server(t), redistest.Server(t)}
	conn := redistest.Open(t, map[string]any{
		config.KeyRedisAddr:        m[0].Addr, // nudges: any of them will do here
		config.KeyLockRedlockAddrs: []string{m[0].Addr, m[1].Addr, m[2].Addr},
	})
	ctx := context.Background()
	if conn.Quorum() != 2 {
		t.Fatalf("quorum of 3 = %d", conn.Quorum())
	}
	m[0].Client().Set(ctx, "lock", "v", time.Minute)
	if st, err := conn.ReadLock(ctx, "lock"); err != nil || st.Held {
		t.Fatalf("lock on 1 master of 3: %+v, %v; want not held", st, err)
	}
	m[2].Client().Set(ctx, "lock", "v", 30*time.Second)
	st, err := conn.ReadLock(ctx, "lock")
	if err != nil || !st.Held || st.TTL > 30*time.Second || st.TTL <= 0 {
		t.Fatalf("lock on 2 masters of 3: %+v, %v; want held with the shorter TTL", st, err)
	}
	m[1].Kill()
	if err := conn.Ping(ctx); err != nil {
		t.Fatalf("Ping with 1 master of 3 down: %v", err)
	}
	if st, err := conn.ReadLock(ctx, "lock"); err != nil || !st.Held {
		t.Fatalf("lock on 2 masters, the third down: %+v, %v", st, err)
	}
	m[2].Kill()
	if err := conn.Ping(ctx); err == nil || !strings.Contains(err.Error(), "lock.redlock_addrs[1]") {
		t.Fatalf("Ping with 2 masters of 3 down: %v; want an error naming lock.redlock_addrs[1]", err)
	}
	if _, err := conn.ReadLock(ctx, "lock"); err == nil {
		t.Fatal("ReadLock with 2 masters of 3 down: no error")
	}
}
