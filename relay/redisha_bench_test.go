// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// commandCalls returns the calls of every command since the server started (INFO
// commandstats), by command name.
func commandCalls(b *testing.B, c *redis.Client) map[string]int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		// cmdstat_set:calls=12,usec=...
		name, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		out[name] = n
	}
	return out
}

// perSecond returns the commands per second between two commandstats samples, the INFO
// calls themselves left out.
func perSecond(before, after map[string]int64, d time.Duration) (total float64, by map[string]float64) {
	by = map[string]float64{}
	for name, n := range after {
		if name == "info" {
			continue
		}
		if delta := n - before[name]; delta > 0 {
			by[name] = float64(delta) / d.Seconds()
			total += by[name]
		}
	}
	return total, by
}

// BenchmarkLockCommandsPerSecond measures the Redis commands a relay spends on its lock and
// nudge subscription on an idle table (lock.ttl 2s, the default), from INFO commandstats
// deltas on a redis-server of the benchmark's own: first the leader alone, then with one
// standby, then the same pair holding the lock on a Redlock quorum of three masters (the
// figure is per master). Run it once: go test -run '^$' -bench LockCommandsPerSecond
// -benchtime 1x ./relay/
func BenchmarkLockCommandsPerSecond(b *testing.B) {
	const window = 10 * time.Second
	bd := setup(b)
	cfg := bd.config()
	cfg.LockTTL = 2 * time.Second
	srv := redistest.Server(b)
	stats := srv.Client()
	measure := func(what string, c *redis.Client) {
		before := commandCalls(b, c)
		time.Sleep(window) // a measurement window, not a synchronisation
		total, by := perSecond(before, commandCalls(b, c), window)
		b.ReportMetric(total, what+"_cmds/s")
		b.Logf("%s: %.1f commands/s %v", what, total, by)
	}
	start := func(c relay.Config, rdb redis.UniversalClient) *relay.Relay {
		r, err := relay.New(bd.db.DB, rdb, bd.pub, c)
		if err != nil {
			b.Fatal(err)
		}
		run(b, r)
		return r
	}
	for i := 0; i < b.N; i++ {
		leader := start(cfg, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		eventually(b, 10*time.Second, "the leader", func() bool { return leader.Health().Leader })
		measure("leader", stats)
		start(cfg, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		measure("leader+standby", stats)

		m := []*redistest.Proc{redistest.Server(b), redistest.Server(b), redistest.Server(b)}
		rc := cfg
		rc.LockKey = cfg.LockKey + ":redlock"
		for _, p := range m {
			rc.LockClients = append(rc.LockClients, redis.NewClient(&redis.Options{Addr: p.Addr}))
		}
		rl := start(rc, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		eventually(b, 10*time.Second, "the Redlock leader", func() bool { return rl.Health().Leader })
		start(rc, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		measure("redlock_leader+standby_per_master", m[0].Client())
	}
}
