// SPDX-License-Identifier: Apache-2.0

package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/redisconn"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// MasterName is the name the Sentinels of NewSentinelGroup monitor.
const MasterName = "outbox"

// SentinelGroup is a master, its replica and three Sentinels (quorum 2).
type SentinelGroup struct {
	Master, Replica *Proc
	Sentinels       []*Proc
}

// NewSentinelGroup starts a master, a replica of it and three Sentinels with quorum 2 that
// consider the master down after downAfter, and waits until every Sentinel knows the
// replica and the other Sentinels (a failover needs both).
func NewSentinelGroup(tb testing.TB, downAfter time.Duration) *SentinelGroup {
	tb.Helper()
	Need(tb, "redis-server", "redis-sentinel")
	g := &SentinelGroup{Master: Server(tb)}
	g.Replica = Server(tb, "replicaof "+strings.Replace(g.Master.Addr, ":", " ", 1))
	rc := g.Replica.Client()
	testenv.Eventually(tb, 10*time.Second, "the replica to sync with its master", func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	for range 3 {
		g.Sentinels = append(g.Sentinels, Sentinel(tb, MasterName, g.Master.Addr, 2, downAfter))
	}
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
		testenv.Eventually(tb, 20*time.Second, "sentinel "+s.Addr+" to know the replica and the other sentinels", func() bool {
			m, err := sc.Master(context.Background(), MasterName).Result()
			return err == nil && m["num-slaves"] == "1" && m["num-other-sentinels"] == "2"
		})
		sc.Close()
	}
	return g
}

// SentinelAddrs returns the Sentinels' addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	out := make([]string, len(g.Sentinels))
	for i, s := range g.Sentinels {
		out[i] = s.Addr
	}
	return out
}

// MasterAddr asks the first Sentinel that answers which address the master has now.
func (g *SentinelGroup) MasterAddr(ctx context.Context) (string, error) {
	var errs []string
	for _, s := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		a, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		sc.Close()
		if err == nil && len(a) == 2 {
			return a[0] + ":" + a[1], nil
		}
		errs = append(errs, fmt.Sprint(err))
	}
	return "", fmt.Errorf("no sentinel names the master: %s", strings.Join(errs, "; "))
}

// NewCluster starts n redis-server nodes with cluster mode on, joins them as a Cluster of n
// masters without replicas (redis-cli --cluster create), and waits until every node reports
// cluster_state:ok.
func NewCluster(tb testing.TB, n int) []*Proc {
	tb.Helper()
	Need(tb, "redis-server", "redis-cli")
	nodes := make([]*Proc, n)
	args := []string{"--cluster", "create"}
	for i := range nodes {
		nodes[i] = Server(tb, "cluster-enabled yes", "cluster-config-file nodes.conf", "cluster-node-timeout 2000")
		args = append(args, nodes[i].Addr)
	}
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, p := range nodes {
		c := p.Client()
		testenv.Eventually(tb, 20*time.Second, "cluster_state:ok on "+p.Addr, func() bool {
			info, err := c.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	return nodes
}

// Open returns the connection redisconn makes from the configuration keys given (the
// others at their defaults), as the binary makes it, closed when the test ends.
func Open(tb testing.TB, keys map[string]any) *redisconn.Conn {
	tb.Helper()
	v := config.NewViper()
	v.SetDefault(config.KeyMySQLDSN, "unused@tcp(127.0.0.1:3306)/unused") // required; Redis tests never use it
	for k, val := range keys {
		v.Set(k, val)
	}
	cfg, err := config.Load(v, "")
	if err != nil {
		tb.Fatal(err)
	}
	c := redisconn.Open(cfg, redisconn.Options{DialTimeout: 500 * time.Millisecond})
	tb.Cleanup(func() { c.Close() })
	return c
}
