// SPDX-License-Identifier: Apache-2.0

package auditor_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

// member is one relay process of a group: its partitions' relays and its auditor, whose
// lookups are counted.
type member struct {
	group  *relay.Group
	lookup *countingLookup
	stop   func()
}

func (g *rig) startMember(t *testing.T, cfg relay.Config) *member {
	t.Helper()
	rdb, _ := testenv.Redis(t)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{g.broker.NameServerAddr()}, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	grp, err := relay.NewGroup(g.db.DB, rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{group: grp, lookup: &countingLookup{Lookup: brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{g.broker.NameServerAddr()}})}}
	a, err := auditor.New(g.db.DB, m.lookup, auditor.Config{Database: "test", Table: "local_message", MinAge: 100 * time.Millisecond,
		MaxAge: time.Hour, Rate: 200, Batch: 20, Idle: 100 * time.Millisecond, Owner: auditor.OwnerOf(grp), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = grp.Run(ctx); done <- struct{}{} }()
	go func() { _ = a.Run(ctx); done <- struct{}{} }()
	stopped := false
	m.stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
			<-done
		}
	}
	t.Cleanup(m.stop)
	return m
}

// Two relays of one group share a table of two partitions: only the holder of partition 0
// audits (the other makes no lookup while rows are sent and audited), and when it stops the
// other takes partition 0 and the audit with it.
func TestOnlyThePartitionZeroHolderAudits(t *testing.T) {
	g := newRig(t)
	if err := schema.MigratePartitioned(context.Background(), g.db.DB, "local_message", 2); err != nil {
		t.Fatal(err)
	}
	_, prefix := testenv.Redis(t)
	cfg := relay.Config{RecordPositions: true, Partitions: 2, PollInterval: 50 * time.Millisecond, DisableNudge: true, Router: g.router,
		Backoff: backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
		LockKey: prefix + "lock", LockTTL: 2 * time.Second}
	a := g.startMember(t, cfg)
	testenv.Eventually(t, 30*time.Second, "the first relay holding both partitions", func() bool { return len(a.group.Owned()) == 2 })
	b := g.startMember(t, cfg)
	testenv.Eventually(t, 30*time.Second, "each relay holding one partition", func() bool {
		return len(a.group.Owned()) == 1 && len(b.group.Owned()) == 1
	})
	owner, other := a, b
	if slices.Contains(b.group.Owned(), 0) {
		owner, other = b, a
	}
	before := other.lookup.checks.Load()
	g.insert(t, "events", "e1", 200)
	testenv.Eventually(t, 30*time.Second, "rows sent and audited", func() bool {
		return auditor.AuditedRows(t, g.db.DB, "local_message") == 200
	})
	if n := other.lookup.checks.Load() - before; n != 0 || owner.lookup.positions.Load() < 200 {
		t.Fatalf("the relay without partition 0 made %d lookups, the owner looked up %d positions; want none, and every row by the owner",
			n, owner.lookup.positions.Load())
	}
	owner.stop()
	testenv.Eventually(t, 30*time.Second, "the other relay holding both partitions", func() bool { return len(other.group.Owned()) == 2 })
	g.insert(t, "events", "e2", 200)
	testenv.Eventually(t, 30*time.Second, "rows sent and audited after the handover", func() bool {
		return auditor.AuditedRows(t, g.db.DB, "local_message") == 400
	})
	if n := other.lookup.positions.Load(); n < 200 {
		t.Errorf("after the handover the new owner looked up %d positions; want the 200 new rows", n)
	}
	t.Logf("owner looked up %d positions in %d lookups; after the handover the other %d in %d",
		owner.lookup.positions.Load(), owner.lookup.checks.Load(), other.lookup.positions.Load(), other.lookup.checks.Load())
}
