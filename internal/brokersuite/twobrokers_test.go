// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestOneBrokerOfTwoDown: a topic of each kind with queues on two brokers of one cluster;
// the relay is given two name servers, the first of which is dead. While the second broker
// is down, every unordered row is delivered through the first, and the ordered rows of keys
// whose queue is on the first flow while those of keys on the second wait; no retry is
// counted, nothing goes dead. Once it is back every row is delivered, each key's messages in
// its own queue in row order.
//
// "Down" is a stopped broker on rmqtest (connections refused) and a frozen one (kill -STOP:
// sends time out) on RocketMQ, whose restart takes 20 s on this machine; restarts after
// kill -9 are TestBrokerKill9AndRestart's.
func TestOneBrokerOfTwoDown(t *testing.T) {
	t.Run("rmqtest", func(t *testing.T) {
		t.Parallel()
		oneBrokerOfTwoDown(t, rmqtestClusterTarget(t))
	})
	t.Run("rocketmq", func(t *testing.T) {
		t.Parallel()
		oneBrokerOfTwoDown(t, realClusterTarget(t))
	})
}

// rmqtestClusterTarget is an rmqtest cluster of two brokers behind two name servers, the
// first stopped; kill and start stop and start broker-b.
func rmqtestClusterTarget(t *testing.T) *target {
	c, err := rmqtest.StartCluster(rmqtest.ClusterOptions{NameServers: 2, Broker: rmqtest.Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.StopNameServer(0)
	ns := c.NameServerAddrs()
	return &target{
		name: "rmqtest", nameServer: ns[1], nameServers: strings.Join(ns, ","),
		brokerAddr: c.Broker(1).BrokerAddr(), peer: c.Broker(0).BrokerAddr(),
		kill: func(*testing.T) { c.Broker(1).StopBroker() },
		start: func(t *testing.T) {
			if err := c.Broker(1).StartBroker(); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// realClusterTarget is broker-a and the fault broker of scripts/rocketmq.sh (one cluster),
// behind a dead name server and the script's; kill and start freeze and thaw the fault broker.
func realClusterTarget(t *testing.T) *target {
	ns, addr := faultBroker(t)
	// Running even if an earlier test left it killed (broker-start returns at once otherwise).
	if _, err := runScript("broker-start", faultBrokerName, faultPort()); err != nil {
		t.Fatal(err)
	}
	dead := deadAddr(t)
	b := &target{
		name: "rocketmq", nameServer: ns, nameServers: dead + "," + ns,
		brokerAddr: addr, peer: testenv.RocketMQBroker(), real: true,
		kill: func(t *testing.T) {
			if _, err := runScript("broker-freeze", faultBrokerName); err != nil {
				t.Fatal(err)
			}
		},
		start: func(t *testing.T) {
			if _, err := runScript("broker-thaw", faultBrokerName); err != nil {
				t.Fatal(err)
			}
		},
	}
	t.Cleanup(func() { _, _ = runScript("broker-thaw", faultBrokerName) })
	return b
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func oneBrokerOfTwoDown(t *testing.T, b *target) {
	e := newEnv(t, b)
	events, orders := b.createTopic(t, "clusterev", b.peer, b.brokerAddr), b.createTopic(t, "clusteror", b.peer, b.brokerAddr)
	const keys, unordered = 16, 200
	ordered := func(from, to int) []outbox.Message {
		var out []outbox.Message
		for n := from; n < to; n++ {
			for k := range keys {
				out = append(out, outbox.Message{MsgID: fmt.Sprintf("o-%02d-%d", k, n), Topic: orders, ShardingKey: fmt.Sprintf("key%02d", k),
					Body: []byte(fmt.Sprint(n))})
			}
		}
		return out
	}
	e.insert(t, ordered(0, 2)...)
	// Single sends, so that unordered rows meet the down broker (a batch would take one queue).
	e.startRelay(t, `OUTBOX_ROUTES=[{"topic":"`+orders+`","ordered":true}]`, "OUTBOX_ROCKETMQ_SEND_TIMEOUT=1s", "OUTBOX_RELAY_BATCH_SEND=false")
	first := b.consume(t, orders).wait(t, keys*2, 60*time.Second)
	home := map[string]string{} // sharding key -> broker/queue
	for _, m := range first {
		home[m.GetProperty(primitive.PropertyShardingKey)] = fmt.Sprintf("%s/%d", m.Queue.BrokerName, m.Queue.QueueId)
	}
	downBroker := func(k string) bool { return !strings.HasPrefix(home[k], "broker-a/") }
	var onDown []string
	for k := range home {
		if downBroker(k) {
			onDown = append(onDown, k)
		}
	}
	if len(home) != keys || len(onDown) == 0 || len(onDown) == keys {
		t.Fatalf("keys' queues %v: want every key, some on each broker", home)
	}

	b.kill(t)
	downAt := time.Now()
	ev := make([]outbox.Message, unordered)
	for i := range ev {
		// The body is the insert time, to measure how long a row waited.
		ev[i] = outbox.Message{MsgID: fmt.Sprintf("ev-%04d", i), Topic: events, Body: []byte(fmt.Sprint(time.Now().UnixMilli()))}
	}
	e.insert(t, append(ev, ordered(2, 4)...)...)
	upKeys := keys - len(onDown)
	testenv.Eventually(t, 60*time.Second, "every unordered row, and the ordered rows of keys on the live broker, sent", func() bool {
		return e.count(t, "topic = ? AND status = 2", events) == unordered &&
			e.count(t, "topic = ? AND status = 2", orders) == 2*keys+2*upKeys
	})
	flowed := time.Since(downAt)
	if n := e.count(t, "retry_count > 0 OR status = 3"); n != 0 {
		t.Fatalf("%d rows with a retry counted or dead while one broker of two is down", n)
	}
	for _, k := range onDown {
		if n := e.count(t, "sharding_key = ? AND status = 2", k); n != 2 {
			t.Fatalf("key %s (queue %s, broker down): %d rows sent, want only the 2 sent before", k, home[k], n)
		}
	}

	b.start(t)
	testenv.Eventually(t, 60*time.Second, "every row sent once the broker is back", func() bool {
		return e.count(t, "status = 2") == unordered+4*keys
	})
	if n := e.count(t, "retry_count > 0 OR status = 3"); n != 0 {
		t.Fatalf("%d rows with a retry counted or dead", n)
	}
	evIn := b.consume(t, events)
	got := evIn.wait(t, unordered, 60*time.Second)
	if len(got) != unordered {
		t.Fatalf("consumed %d unordered messages, want %d", len(got), unordered)
	}
	var longest int64
	for _, m := range got {
		var born int64
		fmt.Sscan(string(m.Body), &born)
		longest = max(longest, m.StoreTimestamp-born)
	}
	// A send to a frozen broker that timed out may still be stored when it thaws: a
	// duplicate, as after any lost ack (consumers dedupe).
	dups := 0
	for id := range got {
		dups += evIn.copies(id) - 1
	}
	t.Logf("%s: with one broker of two down, %d unordered rows and %d ordered rows sent in %v; longest unordered row from insert to store %d ms (send timeout 1s); %d duplicates",
		b.name, unordered, 2*upKeys, flowed.Round(time.Millisecond), longest, dups)
	byKey := map[string][]*primitive.MessageExt{}
	for _, m := range b.consume(t, orders).wait(t, 4*keys, 60*time.Second) {
		k := m.GetProperty(primitive.PropertyShardingKey)
		byKey[k] = append(byKey[k], m)
	}
	for k, ms := range byKey {
		slices.SortFunc(ms, func(a, b *primitive.MessageExt) int { return int(a.QueueOffset - b.QueueOffset) })
		var seq []string
		for _, m := range ms {
			if q := fmt.Sprintf("%s/%d", m.Queue.BrokerName, m.Queue.QueueId); q != home[k] {
				t.Errorf("key %s: a message in %s, its queue is %s", k, q, home[k])
			}
			seq = append(seq, string(m.Body))
		}
		if !slices.Equal(seq, []string{"0", "1", "2", "3"}) {
			t.Errorf("key %s in queue order %v, want 0 1 2 3", k, seq)
		}
	}
}
