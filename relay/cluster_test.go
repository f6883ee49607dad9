// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// TestClusterOneBrokerOfTwoDown: a cluster of two brokers behind two name servers, the first
// of which is down all along. While broker-b is down, every unordered row goes to broker-a
// with its retry count untouched, and the ordered rows of keys whose queue is on broker-a
// flow, while those of keys on broker-b wait (not sent elsewhere, no retry counted). When
// broker-b is back every row is delivered, each key's messages in one queue in row order,
// nothing dead.
func TestClusterOneBrokerOfTwoDown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, err := rmqtest.StartCluster(rmqtest.ClusterOptions{NameServers: 2, Broker: rmqtest.Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.CreateTopic("events", 4)
	c.CreateTopic("orders", 4)
	c.StopNameServer(0)
	var logs testenv.SyncBuffer
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: c.NameServerAddrs(), SendTimeout: 2 * time.Second,
		Log: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "orders", Route: relay.Route{Ordered: true}}, relay.PatternRule{Topic: "*"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Router = router
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)

	// Phase 1, both brokers up: where each key's queue is.
	const keys, perKey, unordered = 24, 6, 300
	ordered := func(from, to int) []outbox.Message {
		var out []outbox.Message
		for n := from; n < to; n++ {
			for k := range keys {
				out = append(out, outbox.Message{MsgID: fmt.Sprintf("o-%02d-%02d", k, n), Topic: "orders", ShardingKey: fmt.Sprintf("key%02d", k), Body: []byte(strconv.Itoa(n))})
			}
		}
		return out
	}
	b.insert(t, ordered(0, 2)...)
	eventually(t, 20*time.Second, "phase 1 sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == keys*2 })
	home := map[string]string{} // sharding key -> broker/queue
	for _, m := range c.Messages("orders") {
		home[m.Properties[primitive.PropertyShardingKey]] = fmt.Sprintf("%s/%d", m.BrokerName, m.QueueID)
	}
	onB := map[string]bool{}
	for k, q := range home {
		onB[k] = strings.HasPrefix(q, "broker-b/")
	}
	if len(home) != keys || !slices.Contains(mapValues(onB), true) || !slices.Contains(mapValues(onB), false) {
		t.Fatalf("keys' queues %v: want every key stored, some on each broker", home)
	}

	// Phase 2, broker-b down.
	c.Broker(1).StopBroker()
	downAt := time.Now()
	var ev []outbox.Message
	for i := range unordered {
		ev = append(ev, outbox.Message{MsgID: fmt.Sprintf("e-%04d", i), Topic: "events", Body: []byte(strconv.FormatInt(time.Now().UnixMilli(), 10))})
	}
	b.insert(t, append(ev, ordered(2, 4)...)...)
	eventually(t, 20*time.Second, "every unordered row and the ordered rows of broker-a's keys sent while broker-b is down", func() bool {
		sentA := 0
		for k, isB := range onB {
			if !isB {
				sentA += countWhere(t, b.db.DB, "sharding_key = ? AND status = 2", k)
			}
		}
		return countWhere(t, b.db.DB, "topic = 'events' AND status = 2") == unordered && sentA == 4*(keys-countTrue(onB))
	})
	allOnA := time.Since(downAt)
	if n := countWhere(t, b.db.DB, "retry_count > 0 OR status = 3"); n != 0 {
		t.Fatalf("%d rows with a retry counted or dead while one broker of two is down (%s)", n, statusCounts(t, b.db.DB))
	}
	if n := c.Broker(1).Count("events"); n != 0 {
		t.Fatalf("broker-b (down) has %d unordered messages", n)
	}
	for k, isB := range onB {
		if isB {
			if n := countWhere(t, b.db.DB, "sharding_key = ? AND status = 2 AND msg_id >= ?", k, fmt.Sprintf("o-%s-02", k[3:])); n != 0 {
				t.Fatalf("key %s (queue %s, broker down) had %d rows sent while its broker was down", k, home[k], n)
			}
		}
	}
	var maxWait int64
	for _, m := range c.Broker(0).Messages("events") {
		born, _ := strconv.ParseInt(string(m.Body), 10, 64)
		maxWait = max(maxWait, m.StoreTimestamp-born)
	}
	t.Logf("broker-b down: %d unordered rows and %d ordered rows of broker-a's keys sent in %v (%.0f rows/s); longest unordered row from insert to store %d ms",
		unordered, 2*(keys-countTrue(onB)), allOnA.Round(time.Millisecond), float64(unordered)/allOnA.Seconds(), maxWait)
	if !strings.Contains(logs.String(), "ordered messages of this queue wait for its broker") {
		t.Errorf("no log line of the waiting ordered queues; logs:\n%s", logs.String())
	}

	// Phase 3, broker-b back.
	if err := c.Broker(1).StartBroker(); err != nil {
		t.Fatal(err)
	}
	total := keys*4 + unordered
	eventually(t, 30*time.Second, "every row sent once broker-b is back", func() bool { return countWhere(t, b.db.DB, "status = 2") == total })
	if n := countWhere(t, b.db.DB, "retry_count > 0 OR status = 3"); n != 0 {
		t.Fatalf("%d rows with a retry counted or dead (%s)", n, statusCounts(t, b.db.DB))
	}
	seq := map[string][]string{}
	for _, m := range c.Messages("orders") {
		k := m.Properties[primitive.PropertyShardingKey]
		if q := fmt.Sprintf("%s/%d", m.BrokerName, m.QueueID); q != home[k] {
			t.Errorf("key %s: a message in %s, its queue is %s", k, q, home[k])
		}
		seq[k] = append(seq[k], string(m.Body))
	}
	for k, s := range seq {
		if !slices.Equal(s, []string{"0", "1", "2", "3"}) {
			t.Errorf("key %s stored in the order %v, want 0 1 2 3", k, s)
		}
	}
}

func mapValues(m map[string]bool) []bool {
	var out []bool
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}
