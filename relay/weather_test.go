// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// Tests of broker weather (issue 21): a broker that is slow, degraded or flaky rather than
// down, and the lock lost while acknowledged sends are still in the pipeline.

// copiesByMsgID counts the broker's copies of each message of topic.
func copiesByMsgID(b *bundle, topic string) map[string]int {
	out := map[string]int{}
	for _, m := range b.broker.Messages(topic) {
		out[m.Properties[outbox.MsgIDProperty]]++
	}
	return out
}

// TestStoredWithoutReplicationIsSent: a SYNC_MASTER whose slave is down stores every
// message and answers SLAVE_NOT_AVAILABLE (or a flush timeout). Stored means sent: each row
// is marked sent after one send, the broker holds one copy of each, and the sends are
// counted in outbox_relay_sent_unreplicated_total.
func TestStoredWithoutReplicationIsSent(t *testing.T) {
	t.Parallel()
	for _, code := range []int16{11, 12, 10} {
		t.Run(fmt.Sprintf("code=%d", code), func(t *testing.T) {
			b := setup(t)
			reg := prometheus.NewRegistry()
			metrics := relay.NewMetrics(reg)
			pub, err := rocketmq.NewPublisher(rocketmq.Config{
				NameServers: []string{b.broker.NameServerAddr()}, SendTimeout: 2 * time.Second, Metrics: metrics,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { pub.Close() })
			b.broker.SetFaults(rmqtest.Faults{Unreplicated: 1, UnreplicatedCode: code})
			const n = 40
			msgs := make([]outbox.Message, n)
			for i := range msgs {
				msgs[i] = outbox.Message{MsgID: fmt.Sprintf("u%03d", i), Topic: "orders", Body: []byte("x")}
				if i%2 == 1 {
					msgs[i].ShardingKey = fmt.Sprintf("SN%d", i) // single sends as well as batches
				}
			}
			b.insert(t, msgs...)
			r, err := relay.New(b.db.DB, b.rdb, pub, b.config())
			if err != nil {
				t.Fatal(err)
			}
			run(t, r)
			eventually(t, 30*time.Second, "every row sent", func() bool {
				return countWhere(t, b.db.DB, "status = 2") == n
			})
			if k := countWhere(t, b.db.DB, "retry_count > 0 OR fail_reason IS NOT NULL"); k != 0 {
				t.Errorf("%d rows were judged failed although the broker stored them", k)
			}
			for id, c := range copiesByMsgID(b, "orders") {
				if c != 1 {
					t.Errorf("the broker holds %d copies of %s, want 1 (a stored message was sent again)", c, id)
				}
			}
			var total float64
			for _, st := range []string{"SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT", "FLUSH_DISK_TIMEOUT"} {
				total += metricValue(t, reg, "outbox_relay_sent_unreplicated_total", st)
			}
			if total != n {
				t.Errorf("outbox_relay_sent_unreplicated_total = %v, want %d", total, n)
			}
		})
	}
}

// TestRequireReplicationCountsUnreplicatedSends: with RequireReplication, a send stored
// without replication is a counted failure: the row is retried and ends dead after
// max_retry_count, with the status in its reason.
func TestRequireReplicationCountsUnreplicatedSends(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{
		NameServers: []string{b.broker.NameServerAddr()}, SendTimeout: 2 * time.Second, RequireReplication: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	b.broker.SetTopicFaults("ledger", rmqtest.Faults{Unreplicated: 1})
	b.insert(t, outbox.Message{MsgID: "l1", Topic: "ledger", Body: []byte("x"), MaxRetries: 2},
		outbox.Message{MsgID: "o1", Topic: "orders", Body: []byte("y")})
	cfg := b.config()
	cfg.Backoff.Base, cfg.Backoff.Max = 20*time.Millisecond, 50*time.Millisecond
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 30*time.Second, "the unreplicated row dead after 3 attempts, the other sent", func() bool {
		return countWhere(t, b.db.DB, "msg_id = 'l1' AND status = 3 AND retry_count = 3 AND fail_reason LIKE '%SLAVE_NOT_AVAILABLE%'") == 1 &&
			countWhere(t, b.db.DB, "msg_id = 'o1' AND status = 2") == 1
	})
}

// TestMissingTopicOnAQuietTableGoesDead: on a cluster with autoCreateTopicEnable=false, rows
// of a topic that does not exist are the only rows of the table. Nothing else is delivered,
// yet the name servers list a live broker: the topic is missing, not the cluster. The rows
// end dead after their attempts, with a reason naming the topic.
func TestMissingTopicOnAQuietTableGoesDead(t *testing.T) {
	t.Parallel()
	b := setupWith(t, rmqtest.Options{NoAutoCreateTopics: true, Topics: []string{"orders"}})
	cfg := b.config()
	cfg.Backoff.Base, cfg.Backoff.Max = 20*time.Millisecond, 50*time.Millisecond
	for i := 0; i < 3; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("typo%d", i), Topic: "ordres", Body: []byte("t"), MaxRetries: 1})
	}
	run(t, b.newRelay(t, cfg))
	eventually(t, 60*time.Second, "the rows of the missing topic dead after their attempts", func() bool {
		return countWhere(t, b.db.DB, "topic = 'ordres' AND status = 3 AND retry_count = 2 AND fail_reason LIKE '%ordres%route%'") == 3
	})
}

// TestMisconfiguredTopicWaitsVisibly: the broker refuses a topic for the relay's credentials
// (ACL 2.0's "has no permission", a wrong secret key's "check signature failed"). That is
// the operator's to fix: no row goes dead or spends a retry, the topic is reported (health,
// metric), its sends back off instead of hammering the broker, the other topics flow, and
// once the permission is granted every row is sent.
func TestMisconfiguredTopicWaitsVisibly(t *testing.T) {
	t.Parallel()
	for _, remark := range []string{
		"User:nobody has no permission to access Topic:payments from 127.0.0.1, no matched policies.",
		"check signature failed.",
	} {
		t.Run(strings.Fields(remark)[0], func(t *testing.T) {
			b := setup(t)
			reg := prometheus.NewRegistry()
			cfg := b.config()
			cfg.Metrics = relay.NewMetrics(reg)
			pub := &countingPublisher{Publisher: b.pub, counts: map[string]int{}}
			b.broker.SetTopicFaults("payments", rmqtest.Faults{ErrorRate: 1, ErrorCode: 16, ErrorRemark: remark})
			for i := 0; i < 5; i++ {
				b.insert(t, outbox.Message{MsgID: fmt.Sprintf("p%d", i), Topic: "payments", Body: []byte("p"), MaxRetries: 1})
				b.insert(t, outbox.Message{MsgID: fmt.Sprintf("o%d", i), Topic: "orders", Body: []byte("o")})
			}
			r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
			if err != nil {
				t.Fatal(err)
			}
			run(t, r)
			eventually(t, 30*time.Second, "the other topic sent and payments reported misconfigured", func() bool {
				_, reported := r.Health().MisconfiguredTopics["payments"]
				return countWhere(t, b.db.DB, "topic = 'orders' AND status = 2") == 5 && reported
			})
			if got := metricValue(t, reg, "outbox_relay_topic_misconfigured", "payments"); got != 1 {
				t.Errorf("outbox_relay_topic_misconfigured{topic=payments} = %v, want 1", got)
			}
			// Let the refusals run for a while: they back off, nothing counts. After the
			// first refusal of the topic's rows, one row at a time probes it, the first after
			// 0.5 s, the next after 1 s, then 2 s (less a quarter of jitter): 3 probes cannot
			// come sooner than 1 s after the first refusal. Retrying every row (the old ~16
			// sends a second) makes them in a fraction of it.
			sends := func() int {
				n := 0
				for i := 0; i < 5; i++ {
					n += pub.count(fmt.Sprintf("p%d", i))
				}
				return n
			}
			eventually(t, 30*time.Second, "the first refusal", func() bool { return sends() >= 1 })
			start, first := time.Now(), sends()
			eventually(t, 30*time.Second, "three more refusals", func() bool { return sends() >= first+3 })
			if took := time.Since(start); took < time.Second {
				t.Errorf("the topic was refused 3 more times within %s: the refusals do not back off", took)
			}
			if n := countWhere(t, b.db.DB, "topic = 'payments' AND (status = 3 OR retry_count > 0)"); n != 0 {
				t.Fatalf("%d rows of the refused topic went dead or spent retries: %s", n, statusCounts(t, b.db.DB))
			}
			if n := countWhere(t, b.db.DB, "topic = 'payments' AND status = 1 AND fail_reason LIKE ?", "%"+strings.Fields(remark)[0]+"%"); n != 5 {
				t.Errorf("%d of 5 refused rows say why they wait, want 5", n)
			}
			b.broker.ClearFaults()
			eventually(t, 60*time.Second, "every refused row sent once permitted", func() bool {
				return countWhere(t, b.db.DB, "topic = 'payments' AND status = 2") == 5
			})
			eventually(t, 10*time.Second, "the topic no longer reported", func() bool {
				_, reported := r.Health().MisconfiguredTopics["payments"]
				return !reported && metricValue(t, reg, "outbox_relay_topic_misconfigured", "payments") == 0
			})
		})
	}
}

// metricValue returns the value of the gauge or counter name in the series with the label
// value, 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestSlowBrokerIsNotADatabaseStall: every send takes longer than the send timeout, for
// longer than the stall timeout, while the database answers at once. The leader keeps its
// lock and reports healthy (a slow broker is a broker incident, not a stall), no row spends
// a retry, and the rows are sent when the broker is fast again.
func TestSlowBrokerIsNotADatabaseStall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{b.broker.NameServerAddr()}, SendTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	cfg := b.config()
	cfg.LockTTL = time.Second
	cfg.QueryTimeout = 500 * time.Millisecond
	cfg.StallTimeout = 1500 * time.Millisecond
	cfg.DisableBatchSend = true
	cfg.Concurrency = 2 // a page of 40 slow sends takes 10 s: far beyond the stall timeout
	const n = 40
	for i := 0; i < n; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("s%02d", i), Topic: "orders", Body: []byte("s")})
	}
	b.broker.SetFaults(rmqtest.Faults{Latency: 2 * time.Second})
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 10*time.Second, "the relay leading", func() bool { return r.Health().Leader })
	// Watch until the slow sends' failures are written back, and for three stall timeouts
	// at least: the leader must not stall or give its lock up meanwhile.
	minEnd := time.Now().Add(3 * cfg.StallTimeout)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(minEnd) || countWhere(t, b.db.DB, "fail_reason IS NOT NULL") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no send failed within 60 s: the broker was not slow and the test proves nothing")
		}
		if h := r.Health(); h.Stalled || !h.Leader {
			t.Fatalf("with a slow broker and a fast database the leader reports stalled=%v leader=%v", h.Stalled, h.Leader)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if k := countWhere(t, b.db.DB, "status = 3"); k != 0 {
		t.Fatalf("%d rows dead through a slow broker", k)
	}
	b.broker.ClearFaults()
	eventually(t, 60*time.Second, "every row sent once the broker is fast", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == n
	})
}

// TestAcknowledgedSendsWrittenBackWhenRedisIsLost: Redis stops answering for longer than
// the lock's TTL while sends are in flight. The leader stops taking new work, but the sends
// already acknowledged are written back: after Redis returns and the relay leads again,
// the broker holds exactly one copy of every row.
func TestAcknowledgedSendsWrittenBackWhenRedisIsLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	proxy, rdb := b.redisThroughProxy(t, 200*time.Millisecond)

	cfg := b.config()
	cfg.LockTTL = time.Second
	cfg.DisableBatchSend = true
	cfg.BatchSize = 100
	cfg.DisableNudge = true
	const n = 1500
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("k%05d", i), Topic: "orders", Body: []byte("k")}
	}
	b.insert(t, msgs...)
	b.broker.SetFaults(rmqtest.Faults{Latency: 150 * time.Millisecond})
	r, err := relay.New(b.db.DB, rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 60*time.Second, "a part of the rows sent", func() bool { return countWhere(t, b.db.DB, "status = 2") >= 200 })
	proxy.Freeze()
	eventually(t, 30*time.Second, "the lock lost while Redis does not answer", func() bool { return !r.Health().Leader })
	if countWhere(t, b.db.DB, "status = 2") == n {
		t.Fatal("every row was sent before the lock was lost: the test proves nothing")
	}
	proxy.Thaw()
	eventually(t, 120*time.Second, "every row sent after Redis is back", func() bool { return countWhere(t, b.db.DB, "status = 2") == n })
	twice := 0
	for _, c := range copiesByMsgID(b, "orders") {
		if c > 1 {
			twice++
		}
	}
	if twice != 0 {
		t.Fatalf("%d of %d rows published twice: acknowledged sends were forgotten when the lock was lost", twice, n)
	}
}

// TestUnorderedRowOfAnOrderDoesNotHoldItsOrderedEvents: an order's close-check goes on an
// unordered route, delayed 30 minutes; the same order's ordered events, written after it,
// are sent at once in order.
func TestUnorderedRowOfAnOrderDoesNotHoldItsOrderedEvents(t *testing.T) {
	t.Parallel()
	b := setup(t)
	router, err := relay.NewPatternRouter(
		relay.PatternRule{Topic: "order-events", Tag: "close-check", Route: relay.Route{}},
		relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}},
	)
	if err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	cfg.Router = router
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.insert(t, outbox.Message{MsgID: "SN1-check", Topic: "order-events", Tag: "close-check", ShardingKey: "SN1",
		Body: []byte("check"), DeliverAt: time.Now().Add(30 * time.Minute)})
	for i, tag := range []string{"created", "paid", "shipped"} {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("SN1-%d-%s", i, tag), Topic: "order-events", Tag: tag, ShardingKey: "SN1", Body: []byte(tag)})
	}
	run(t, b.newRelay(t, cfg))
	got, err := b.broker.WaitMessages(ctx, "order-events", 3)
	if err != nil {
		t.Fatalf("the order's ordered events were held back: %v; rows: %s", err, statusCounts(t, b.db.DB))
	}
	var order []string
	for _, m := range got {
		order = append(order, m.Tags)
	}
	if strings.Join(order, ",") != "created,paid,shipped" {
		t.Fatalf("ordered events arrived as %v", order)
	}
	if k := countWhere(t, b.db.DB, "msg_id = 'SN1-check' AND status = 0"); k != 1 {
		t.Fatal("the delayed close-check was not left waiting")
	}
}

// TestOutageRowsFollowTheBrokersReturn: the broker is down while writers keep committing;
// the rows of the outage are deferred, further and further as it lasts. When the broker is
// back, they are sent before the deferrals they were given run out: its return brings them
// forward instead of leaving them to wait up to 30 s.
func TestOutageRowsFollowTheBrokersReturn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.DisableNudge = true
	wctx, stopWriters := context.WithCancel(context.Background())
	defer stopWriters()
	written := make(chan struct{})
	go func() {
		defer close(written)
		for i := 0; wctx.Err() == nil; i++ {
			if err := b.writer.InsertNoTx(context.Background(), b.db.DB, []outbox.Message{{MsgID: fmt.Sprintf("w%05d", i), Topic: "orders", Body: []byte("w")}}); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-wctx.Done():
			case <-time.After(20 * time.Millisecond): // writers' pace, not a synchronisation
			}
		}
	}()
	run(t, b.newRelay(t, cfg))
	eventually(t, 30*time.Second, "rows flowing", func() bool { return countWhere(t, b.db.DB, "status = 2") >= 20 })
	b.broker.StopBroker()
	// Let the outage last until its rows carry deferrals of several seconds.
	eventually(t, 60*time.Second, "rows deferred by 4 s or more", func() bool {
		return countWhere(t, b.db.DB, "status = 1 AND next_retry_time > ? AND fail_reason LIKE '%broker incident%'",
			time.Now().Add(4*time.Second).UnixMilli()) >= 5
	})
	// The rows deferred by 2 s or more: one due sooner may be tried (and deferred again)
	// before the broker is back, its first deadline then saying nothing.
	deferred := map[int64]int64{}
	rs, err := b.db.Query("SELECT id, next_retry_time FROM local_message WHERE status = 1 AND fail_reason LIKE '%broker incident%' AND next_retry_time > ?",
		time.Now().Add(2*time.Second).UnixMilli())
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id, next int64
		if err := rs.Scan(&id, &next); err != nil {
			t.Fatal(err)
		}
		deferred[id] = next
	}
	rs.Close()
	if err := b.broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "every deferred row sent", func() bool {
		return countWhere(t, b.db.DB, "status = 1 AND fail_reason LIKE '%broker incident%'") == 0
	})
	stopWriters()
	<-written
	late := 0
	for id, next := range deferred {
		var sent int64
		if err := b.db.QueryRow("SELECT COALESCE(sent_time, 0) FROM local_message WHERE id = ? AND status = 2", id).Scan(&sent); err != nil {
			t.Fatalf("row %d: %v", id, err)
		}
		if sent >= next {
			late++
		}
	}
	if late > 0 {
		t.Fatalf("%d of %d rows deferred during the outage waited out their deferral after the broker was back", late, len(deferred))
	}
}

// BenchmarkOutageRecovery: busy writers (busyWriters) commit throughout a broker outage of
// OUTAGE (default 25s); reports how long after the broker's return the outage's rows were
// all sent (drained_s):
//
//	go test -run '^$' -bench OutageRecovery -benchtime 1x ./relay/
func BenchmarkOutageRecovery(b *testing.B) {
	outage := 25 * time.Second
	if v := os.Getenv("OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		outage = d
	}
	for i := 0; i < b.N; i++ {
		bu := setup(b)
		cfg := bu.config()
		cfg.Backoff = backoff.Policy{} // the defaults, as deployed
		cfg.DisableNudge = true
		stopWriters := busyWriters(b, bu)
		run(b, bu.newRelay(b, cfg))
		eventually(b, 30*time.Second, "rows flowing", func() bool { return countWhere(b, bu.db.DB, "status = 2") >= 20 })
		bu.broker.StopBroker()
		time.Sleep(outage) // the outage itself, not a synchronisation
		if err := bu.broker.StartBroker(); err != nil {
			b.Fatal(err)
		}
		back := time.Now()
		var maxID int64
		if err := bu.db.QueryRow("SELECT MAX(id) FROM local_message").Scan(&maxID); err != nil {
			b.Fatal(err)
		}
		eventually(b, 120*time.Second, "every row of the outage sent", func() bool {
			return countWhere(b, bu.db.DB, "id <= ? AND status <> 2", maxID) == 0
		})
		b.ReportMetric(time.Since(back).Seconds(), "drained_s")
		stopWriters()
	}
}

// BenchmarkHeldBacklogPass: one ordered key's head failed and waits an hour (or 30 s), with
// 20,000 or 40,000 of the key's rows behind it, 20 fresh rows of other keys, and busy writers
// (busyWriters) beside; reports the time of one pass (ms/pass), which must not grow with the
// square of the held backlog, nor with the backlog when its head is due soon:
//
//	go test -run '^$' -bench HeldBacklogPass -benchtime 1x ./relay/
func BenchmarkHeldBacklogPass(b *testing.B) {
	for _, c := range []struct {
		held int
		due  time.Duration
	}{{20000, time.Hour}, {40000, time.Hour}, {20000, 30 * time.Second}} {
		held := c.held
		b.Run(fmt.Sprintf("held=%d_due=%s", held, c.due), func(b *testing.B) {
			bu := setup(b)
			router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}})
			if err != nil {
				b.Fatal(err)
			}
			cfg := bu.config()
			cfg.Router = router
			r := bu.newRelay(b, cfg)
			bu.insert(b, outbox.Message{MsgID: "head", Topic: "order-events", ShardingKey: "SN-HELD", Body: []byte("h")})
			if _, err := bu.db.Exec("UPDATE local_message SET status = 1, retry_count = 1, next_retry_time = ? WHERE msg_id = 'head'",
				time.Now().Add(time.Hour).UnixMilli()); err != nil {
				b.Fatal(err)
			}
			for start := 0; start < held; start += 1000 {
				msgs := make([]outbox.Message, 1000)
				for i := range msgs {
					msgs[i] = outbox.Message{MsgID: fmt.Sprintf("held-%06d", start+i), Topic: "order-events", ShardingKey: "SN-HELD", Body: []byte(`{"event":"held"}`)}
				}
				bu.insert(b, msgs...)
			}
			// The head's due time counts from now: the writes above take long on a busy machine.
			if _, err := bu.db.Exec("UPDATE local_message SET next_retry_time = ? WHERE msg_id = 'head'", time.Now().Add(c.due).UnixMilli()); err != nil {
				b.Fatal(err)
			}
			busyWriters(b, bu)
			// A warm-up pass: the first sends of a topic learn its route, and one racing the
			// others may be deferred; the passes measured are the steady ones.
			bu.insert(b, outbox.Message{MsgID: "warm-up", Topic: "order-events", ShardingKey: "SN-WARM", Body: []byte("w")})
			if _, err := r.DrainOnce(context.Background()); err != nil {
				b.Fatal(err)
			}
			passes := 0
			var total time.Duration
			b.ResetTimer()
			for i := 0; i < 5; i++ {
				b.StopTimer()
				for k := 0; k < 20; k++ {
					bu.insert(b, outbox.Message{MsgID: fmt.Sprintf("fresh-%d-%d", i, k), Topic: "order-events", ShardingKey: fmt.Sprintf("SN-%d-%d", i, k), Body: []byte("f")})
				}
				b.StartTimer()
				start := time.Now()
				st, err := r.DrainOnce(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				total += time.Since(start)
				passes++
				if fresh := countWhere(b, bu.db.DB, "msg_id LIKE ? AND status = 2", fmt.Sprintf("fresh-%d-%%", i)); fresh != 20 {
					var reason string
					bu.db.QueryRow("SELECT COALESCE(fail_reason, '') FROM local_message WHERE msg_id LIKE ? AND status <> 2 LIMIT 1", fmt.Sprintf("fresh-%d-%%", i)).Scan(&reason)
					b.Fatalf("pass %d: %d of 20 fresh rows sent (one unsent says %q)", i, fresh, reason)
				}
				if n := countWhere(b, bu.db.DB, "msg_id LIKE 'held-%' AND status = 0"); n != held {
					b.Fatalf("pass %d (%+v): %d held rows still pending, want %d", i, st, n, held)
				}
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(passes), "ms/pass")
		})
	}
}

// busyWriters runs the order service of a production database beside a benchmark: 8 writers
// at 200 transactions/s in all, a quarter of them held open up to 50 ms after their inserts,
// a fifth rolled back, the rest committed and nudged. The returned func stops them.
func busyWriters(b *testing.B, bu *bundle) (stop func()) {
	b.Helper()
	app, err := loadgen.NewApp(context.Background(), bu.db.DB, bu.writer, "orders", true)
	if err != nil {
		b.Fatal(err)
	}
	stopApp := app.Start(loadgen.Busy, nil, "")
	stop = func() {
		if err := stopApp(); err != nil {
			b.Error(err)
		}
	}
	b.Cleanup(stop)
	return stop
}

// TestLostAckIsSentAgainAtOnce: the broker stores every message of a topic and then closes
// the connection without answering (a lost acknowledgement). rocketmq-client-go would leave
// the send pending until its timeout (a minute here); the publisher sees its connection
// closed and sends it again at once on a new connection, four times, before giving up with a
// transient failure: the broker holds five copies long before the send timeout.
func TestLostAckIsSentAgainAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{b.broker.NameServerAddr()}, SendTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // half the send timeout
	defer cancel()
	// A first send learns the route and opens the connections.
	if err := pub.Send(ctx, relay.Route{Ordered: true}, &relay.Message{MsgID: "warm", Topic: "lost-acks", ShardingKey: "SN1", Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	b.broker.SetTopicFaults("lost-acks", rmqtest.Faults{DropAfterStore: 1})
	err = pub.Send(ctx, relay.Route{Ordered: true}, &relay.Message{MsgID: "lost", Topic: "lost-acks", ShardingKey: "SN1", Body: []byte("l")})
	if ctx.Err() != nil {
		t.Fatalf("the send waited for its timeout: a dropped connection was not noticed (copies stored: %d)", copiesByMsgID(b, "lost-acks")["lost"])
	}
	if err == nil || relay.KindOf(err) != relay.SendTransient {
		t.Fatalf("send with every ack lost: got %v (kind %v), want a transient failure", err, relay.KindOf(err))
	}
	if c := copiesByMsgID(b, "lost-acks")["lost"]; c != 5 {
		t.Fatalf("the broker holds %d copies of the message, want 5 (the send and four immediate re-sends)", c)
	}
}

// heldBacklog writes one ordered key whose head failed and waits an hour, with n rows
// behind it, and returns the router of its ordered route.
func heldBacklog(t testing.TB, b *bundle, n int) relay.Router {
	t.Helper()
	return heldBacklogDue(t, b, n, time.Hour)
}

// heldBacklogDue is heldBacklog with the head due after due.
func heldBacklogDue(t testing.TB, b *bundle, n int, due time.Duration) relay.Router {
	t.Helper()
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true}})
	if err != nil {
		t.Fatal(err)
	}
	b.insert(t, outbox.Message{MsgID: "head", Topic: "order-events", ShardingKey: "SN-HELD", Body: []byte("h")})
	if _, err := b.db.Exec("UPDATE local_message SET status = 1, retry_count = 1, next_retry_time = ? WHERE msg_id = 'head'",
		time.Now().Add(due).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("held-%06d", i), Topic: "order-events", ShardingKey: "SN-HELD", Body: []byte("held")}
	}
	b.insert(t, msgs...)
	return router
}

// TestHeldBacklogIsNotReadAgain: an ordered key's head failed and waits an hour, 3,000 of
// its rows behind it. The first pass finds them held; the passes after it read only the
// rows written since, not the held backlog again, and the held rows stay unsent.
func TestHeldBacklogIsNotReadAgain(t *testing.T) {
	t.Parallel()
	heldBacklogNotReadAgain(t, time.Hour)
}

// heldBacklogNotReadAgain is TestHeldBacklogIsNotReadAgain with the head due after due.
func heldBacklogNotReadAgain(t *testing.T, due time.Duration) {
	t.Helper()
	b := setup(t)
	const held = 3000
	cfg := b.config()
	cfg.Router = heldBacklogDue(t, b, held, due)
	r := b.newRelay(t, cfg)
	ctx := context.Background()
	st, err := r.DrainOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Held < held {
		t.Fatalf("first pass: %+v, want the %d rows behind the head held", st, held)
	}
	for pass := 0; pass < 3; pass++ {
		for k := 0; k < 5; k++ {
			b.insert(t, outbox.Message{MsgID: fmt.Sprintf("fresh-%d-%d", pass, k), Topic: "order-events", ShardingKey: fmt.Sprintf("SN-%d-%d", pass, k), Body: []byte("f")})
		}
		st, err := r.DrainOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Sent != 5 || st.Read > 5 {
			t.Fatalf("pass %d: %+v, want the 5 fresh rows read and sent, and the held backlog not read again", pass, st)
		}
	}
	if n := countWhere(t, b.db.DB, "msg_id LIKE 'held-%' AND status = 0"); n != held {
		t.Fatalf("%d of %d held rows still pending", n, held)
	}
}

// TestParkedKeyFollowsItsHeadBroughtForward: the rows held behind a head that waits an hour
// are parked, and so is a row of the key written after them (held behind the nearest of
// them, parked too); an operator then makes the head due now. Once the head is sent, its
// key's rows follow in order at once, not an hour later.
func TestParkedKeyFollowsItsHeadBroughtForward(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const held = 300
	cfg := b.config()
	cfg.Router = heldBacklog(t, b, held-1)
	r := b.newRelay(t, cfg)
	ctx := context.Background()
	if _, err := r.DrainOnce(ctx); err != nil {
		t.Fatal(err)
	}
	b.insert(t, outbox.Message{MsgID: fmt.Sprintf("held-%06d", held-1), Topic: "order-events", ShardingKey: "SN-HELD", Body: []byte("late")})
	if _, err := r.DrainOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, b.db.DB, "status = 0 AND next_retry_time > 0 AND msg_id LIKE 'held-%'"); n != held {
		t.Fatalf("%d of %d held rows parked: %s", n, held, statusCounts(t, b.db.DB))
	}
	if _, err := b.db.Exec("UPDATE local_message SET next_retry_time = 0 WHERE msg_id = 'head'"); err != nil {
		t.Fatal(err)
	}
	for pass := 0; pass < 5 && countWhere(t, b.db.DB, "status = 2") < held+1; pass++ {
		if _, err := r.DrainOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := countWhere(t, b.db.DB, "status = 2"); n != held+1 {
		t.Fatalf("%d of %d rows of the key sent after its head was brought forward: %s", n, held+1, statusCounts(t, b.db.DB))
	}
	got := b.broker.Messages("order-events")
	for i, m := range got {
		want := "head"
		if i > 0 {
			want = fmt.Sprintf("held-%06d", i-1)
		}
		if id := m.Properties[outbox.MsgIDProperty]; id != want {
			t.Fatalf("message %d on the broker is %s, want %s (key order broken)", i, id, want)
		}
	}
}

// TestSlowSendHoldsOnlyItsOwnRows: one broker of two answers every send 10 s late (within the
// send timeout). While a send to it waits, the rows for the other broker written after it are
// sent: the slow send holds its own row, not its page and every row behind it. The slow row is
// sent once when its broker answers.
func TestSlowSendHoldsOnlyItsOwnRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	east, eastPub := secondBroker(t, 30*time.Second)
	east.SetFaults(rmqtest.Faults{Latency: 10 * time.Second})
	pub := &countingPublisher{Publisher: topicPublisher{"east": eastPub, "west": b.pub}, counts: map[string]int{}}
	b.insert(t, outbox.Message{MsgID: "slow", Topic: "east", ShardingKey: "SN-SLOW", Body: []byte("s")})
	r, err := relay.New(b.db.DB, b.rdb, pub, b.config())
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 30*time.Second, "the slow send started", func() bool { return pub.count("slow") == 1 })
	for i := 0; i < 10; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("w%02d", i), Topic: "west", Body: []byte("w")})
	}
	eventually(t, 30*time.Second, "the other broker's rows sent", func() bool {
		return countWhere(t, b.db.DB, "topic = 'west' AND status = 2") == 10
	})
	if countWhere(t, b.db.DB, "msg_id = 'slow' AND status = 0") != 1 {
		t.Fatalf("the slow row was answered before the rows behind it were sent: they waited for it (%s)", statusCounts(t, b.db.DB))
	}
	eventually(t, 60*time.Second, "the slow row sent", func() bool { return countWhere(t, b.db.DB, "msg_id = 'slow' AND status = 2") == 1 })
	if c := pub.count("slow"); c != 1 {
		t.Fatalf("the slow row was sent %d times, want 1", c)
	}
}

// A late unit's rows, written back while a later pass had already read them unsent, are not
// sent again by that pass. Made to happen: one send slot, a send that outlasts its page (it
// goes on detached, holding the slot), and a failed row that the next pass reads first, so
// that the pass's first page waits for the slot while the scan reads the slow row, still
// unsent, into its second page; the slow send ends, is written back and frees the slot, and
// only then is the second page published.
func TestLateUnitsRowsAreNotSentAgainByAPassThatReadThemBefore(t *testing.T) {
	t.Parallel()
	b := setup(t)
	east, eastPub := secondBroker(t, 30*time.Second)
	east.SetFaults(rmqtest.Faults{Latency: 2 * time.Second})
	pub := &countingPublisher{Publisher: topicPublisher{"east": eastPub, "west": b.pub}, counts: map[string]int{}}
	b.insert(t, outbox.Message{MsgID: "slow", Topic: "east", Body: []byte("s")})
	cfg := b.config()
	cfg.Concurrency = 1
	cfg.BatchSize = 1
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 30*time.Second, "the slow send started", func() bool { return pub.count("slow") == 1 })
	if _, err := b.db.Exec("INSERT INTO local_message (msg_id, topic, content, status, retry_count) VALUES ('failed', 'west', 'f', 1, 1)"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "both rows sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == 2 })
	// Give the pass that read the slow row a chance to publish its page.
	b.insert(t, outbox.Message{MsgID: "after", Topic: "west", Body: []byte("a")})
	eventually(t, 30*time.Second, "a later row sent", func() bool { return countWhere(t, b.db.DB, "msg_id = 'after' AND status = 2") == 1 })
	if c := pub.count("slow"); c != 1 {
		t.Fatalf("the slow row was sent %d times, want once", c)
	}
}
