// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// Tests of handovers: a leader that stops (SIGTERM) or hands a partition over to another
// relay of its group while sends are in flight on a broker slower than the lock's TTL.

// slowBrokerPublishers makes the bundle's broker answer every send after latency and
// returns n counting publishers to it, each with a send timeout well past the latency and
// its route to topic learnt (one send before the latency is set).
func slowBrokerPublishers(t *testing.T, b *bundle, topic string, latency time.Duration, n int) []*countingPublisher {
	t.Helper()
	var pubs []*countingPublisher
	for i := 0; i < n; i++ {
		pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{b.broker.NameServerAddr()}, SendTimeout: 10 * latency})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pub.Close() })
		if err := pub.Send(context.Background(), relay.Route{}, &relay.Message{MsgID: fmt.Sprintf("warm-%d", i), Topic: topic, Body: []byte("w")}); err != nil {
			t.Fatal(err)
		}
		pubs = append(pubs, &countingPublisher{Publisher: pub, counts: map[string]int{}})
	}
	b.broker.SetFaults(rmqtest.Faults{Latency: latency})
	return pubs
}

// insertRows writes n unordered rows of topic, msg ids prefix-000 on.
func insertRows(t *testing.T, b *bundle, topic, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
		msgs[i] = outbox.Message{MsgID: ids[i], Topic: topic, Body: []byte("in flight")}
	}
	b.insert(t, msgs...)
	return ids
}

// inFlight reports whether every one of ids was given to pub.
func inFlight(pub *countingPublisher, ids []string) bool {
	for _, id := range ids {
		if pub.count(id) == 0 {
			return false
		}
	}
	return true
}

// checkOneCopyEach fails the test unless every row was sent, and, once the next owner is
// stopped (stop returns when its own sends are answered), the broker holds at most 1.05
// copies per row of ids (one each, but for a lost acknowledgement).
func checkOneCopyEach(t *testing.T, b *bundle, topic string, ids []string, stop func()) {
	t.Helper()
	eventually(t, 60*time.Second, "every row sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == len(ids) })
	stop()
	copies := copiesByMsgID(b, topic)
	total, twice := 0, 0
	for _, id := range ids {
		total += copies[id]
		if copies[id] > 1 {
			twice++
		}
	}
	t.Logf("%d rows, %d copies on the broker (%.3f per row)", len(ids), total, float64(total)/float64(len(ids)))
	if float64(total) > 1.05*float64(len(ids)) {
		t.Fatalf("the broker holds %d copies of %d rows (%d rows published again by the next owner), want at most 1.05 per row",
			total, len(ids), twice)
	}
}

// TestShutdownKeepsTheLockUntilSendsInFlightAreWrittenBack: the leader is stopped (SIGTERM)
// while its sends of 40 rows wait on a broker that answers 3 s late, three times the lock's
// TTL, and a standby waits for the lock. The leader keeps its lock until the sends are
// answered and written back, so the standby finds them sent: one copy of each on the broker.
func TestShutdownKeepsTheLockUntilSendsInFlightAreWrittenBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pubs := slowBrokerPublishers(t, b, "handover", 3*time.Second, 2)
	ids := insertRows(t, b, "handover", "sigterm", 40)
	cfg := b.config()
	cfg.LockTTL = time.Second
	cfg.ShutdownTimeout = 30 * time.Second
	leader, err := relay.New(b.db.DB, b.rdb, pubs[0], cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopLeader := run(t, leader)
	eventually(t, 30*time.Second, "every row's send in flight", func() bool { return inFlight(pubs[0], ids) })
	standby, err := relay.New(b.db.DB, b.rdb, pubs[1], cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopStandby := run(t, standby)
	stopLeader() // SIGTERM: returns once the sends in flight are written back
	checkOneCopyEach(t, b, "handover", ids, stopStandby)
}

// TestRebalanceKeepsTheLockUntilSendsInFlightAreWrittenBack: a relay holds both partitions of
// a table while its sends of 80 rows wait on a broker that answers 3 s late, three times the
// lock's TTL; a second relay joins the group and is assigned one of them. The first keeps
// that partition's lock until its sends are answered and written back, so the second
// finds them sent: one copy of each on the broker.
func TestRebalanceKeepsTheLockUntilSendsInFlightAreWrittenBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.migrate(t, 2)
	pubs := slowBrokerPublishers(t, b, "handover", 3*time.Second, 2)
	ids := insertRows(t, b, "handover", "rebalance", 80)
	cfg := b.config()
	cfg.Partitions = 2
	cfg.LockTTL = time.Second
	cfg.ShutdownTimeout = 30 * time.Second
	first, err := relay.NewGroup(b.db.DB, b.rdb, pubs[0], cfg)
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, first)
	eventually(t, 30*time.Second, "every row's send in flight", func() bool { return inFlight(pubs[0], ids) })
	second, err := relay.NewGroup(b.db.DB, b.rdb, pubs[1], cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopSecond := runGroup(t, second)
	eventually(t, 30*time.Second, "a partition handed over", func() bool { return len(second.Owned()) == 1 })
	checkOneCopyEach(t, b, "handover", ids, stopSecond)
}
