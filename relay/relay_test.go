// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestConcurrentWritersEveryCommittedRowDeliveredExactlyAsWritten is the relay's core promise:
// 8 writers commit (or roll back) orders with their messages while the relay runs; every
// committed message reaches the broker exactly as written, no rolled-back one ever does.
func TestConcurrentWritersEveryCommittedRowDeliveredExactlyAsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := b.db.Exec("CREATE TABLE orders (order_sn varchar(32) PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	cfg := b.config()
	r := b.newRelay(t, cfg)
	run(t, r)

	const writers, perWriter = 8, 1250 // 10,000 transactions
	var mu sync.Mutex
	committed := map[string]outbox.Message{}
	rolledBack := map[string]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				sn := fmt.Sprintf("SN-%d-%05d", w, i)
				msg := outbox.Message{
					MsgID: "m-" + sn, Topic: []string{"orders", "payments"}[i%2], Tag: "created",
					Keys: []string{sn}, Body: []byte(fmt.Sprintf(`{"orderSn":%q,"note":"naïve ✓ %d"}`, sn, i)),
				}
				if i%3 == 0 {
					msg.Properties = map[string]string{"traceparent": "00-" + sn, "writer": strconv.Itoa(w)}
				}
				rollback := i%10 == 7 // a tenth of the transactions roll back on purpose
				if err := writeOrder(ctx, b, sn, msg, rollback); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if rollback {
					rolledBack[msg.MsgID] = true
				} else {
					committed[msg.MsgID] = msg
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := len(committed)
	eventually(t, 90*time.Second, "all committed rows sent", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == want
	})
	if n := countWhere(t, b.db.DB, "1=1"); n != want {
		t.Fatalf("%d rows in the table, want %d (rolled-back transactions left rows?)", n, want)
	}

	got := map[string]rmqtest.Message{}
	for _, topic := range []string{"orders", "payments"} {
		for _, m := range b.broker.Messages(topic) {
			id := m.Properties[outbox.MsgIDProperty]
			if _, dup := got[id]; dup {
				t.Errorf("message %s stored twice without any fault", id)
			}
			got[id] = m
		}
	}
	if len(got) != want {
		t.Errorf("broker holds %d messages, want %d", len(got), want)
	}
	for id, w := range committed {
		m, ok := got[id]
		if !ok {
			t.Errorf("committed message %s never delivered", id)
			continue
		}
		wantProps := maps.Clone(w.Properties)
		if wantProps == nil {
			wantProps = map[string]string{}
		}
		wantProps[outbox.MsgIDProperty] = id
		if m.Topic != w.Topic || m.Tags != w.Tag || !slices.Equal(m.Keys, w.Keys) || !bytes.Equal(m.Body, w.Body) ||
			!maps.Equal(m.UserProperties(), wantProps) {
			t.Errorf("message %s delivered as topic=%s tag=%s keys=%v body=%q props=%v; written as %+v",
				id, m.Topic, m.Tags, m.Keys, m.Body, m.UserProperties(), w)
		}
	}
	for id := range rolledBack {
		if _, ok := got[id]; ok {
			t.Errorf("rolled-back message %s was published", id)
		}
	}
}

func writeOrder(ctx context.Context, b *bundle, sn string, msg outbox.Message, rollback bool) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders VALUES (?)", sn); err != nil {
		return err
	}
	if err := b.writer.Insert(ctx, tx, &msg); err != nil {
		return err
	}
	if rollback {
		return tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	return b.writer.Nudge(ctx)
}

// TestBrokerErrorsAndOutageAreRetriedThenDelivered: failures are recorded with their reason
// and a next attempt on the backoff schedule, and everything is delivered once the broker
// recovers.
func TestBrokerIncidentsSpendNoRetriesThenDeliver(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.DisableNudge = true
	logs := &testenv.SyncBuffer{}
	logger := zerolog.New(logs)
	cfg.Logger = &logger
	reg := prometheus.NewRegistry()
	cfg.Metrics = relay.NewMetrics(reg)
	r := b.newRelay(t, cfg)
	b.broker.SetFaults(rmqtest.Faults{ErrorRate: 1}) // SYSTEM_ERROR to every send
	for i := 0; i < 50; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("e%02d", i), Topic: "orders", Body: []byte("x")})
	}
	ctx := context.Background()

	// One pass while the broker fails every send: an incident of the broker, which costs the
	// messages nothing; each row says why it waits and waits out the broker's backoff.
	before := time.Now().UnixMilli()
	st, err := r.DrainOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Deferred != 50 || st.Sent != 0 || st.Retried != 0 || st.Dead != 0 {
		t.Fatalf("first pass: %+v, want 50 deferred", st)
	}
	// The first deferral is at least 0.5 s less its 25 % jitter, rounded down to 100 ms.
	if n := countWhere(t, b.db.DB, "status = 1 AND retry_count = 0 AND fail_reason LIKE '%CODE: 1%not counted%' AND next_retry_time >= ?",
		before+250); n != 50 {
		t.Fatalf("%d rows deferred with the broker's reason, untouched retry counts and a later attempt, want 50 (%s)", n, statusCounts(t, b.db.DB))
	}

	// Now the broker is down altogether, through several attempts of every row: no retry is
	// spent, and the incident is logged once, not once per attempt.
	b.broker.ClearFaults()
	b.broker.StopBroker()
	run(t, r)
	eventually(t, 30*time.Second, "three deferred attempts of every row", func() bool {
		return countWhere(t, b.db.DB, "fail_reason LIKE '%unreachable%'") == 50 &&
			metric(t, reg, "outbox_relay_failed_total", map[string]string{"topic": "orders"}) >= 50*3
	})
	if n := countWhere(t, b.db.DB, "status = 1 AND retry_count = 0"); n != 50 {
		t.Fatalf("%d rows still failed with no retry spent, want 50: the outage spent retries (%s)", n, statusCounts(t, b.db.DB))
	}
	if n := strings.Count(logs.String(), "broker failing"); n > 2 {
		t.Fatalf("the outage was logged %d times; want one line per state change:\n%s", n, logs.String())
	}
	if err := b.broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "delivery after recovery", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == 50
	})
	if !strings.Contains(logs.String(), "broker recovered") {
		t.Fatalf("no recovery line in the log:\n%s", logs.String())
	}
	msgs := b.broker.Messages("orders")
	ids := map[string]bool{}
	for _, m := range msgs {
		ids[m.Properties[outbox.MsgIDProperty]] = true
	}
	if len(ids) != 50 {
		t.Fatalf("broker has %d distinct messages, want 50", len(ids))
	}
	if n := countWhere(t, b.db.DB, "status = 2 AND sent_time > 0 AND retry_count = 0"); n != 50 {
		t.Fatalf("%d sent rows with sent_time and no retry spent, want 50", n)
	}
}

// TestRetriesExhaustedGoDead: max_retry_count = 2 means three attempts, then dead with the
// last reason, while a healthy topic keeps flowing.
func TestRetriesExhaustedGoDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Backoff.Base = 20 * time.Millisecond
	cfg.Backoff.Max = 40 * time.Millisecond
	r := b.newRelay(t, cfg)
	// 25 is a refusal of the request itself, not a state of the broker: it counts.
	b.broker.SetTopicFaults("broken", rmqtest.Faults{ErrorRate: 1, ErrorCode: 25})
	for i := 0; i < 5; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("dead-%d", i), Topic: "broken", Body: []byte("x"), MaxRetries: 2})
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("ok-%d", i), Topic: "healthy", Body: []byte("y")})
	}
	run(t, r)
	eventually(t, 30*time.Second, "broken rows dead", func() bool {
		return countWhere(t, b.db.DB, "status = 3") == 5
	})
	if n := countWhere(t, b.db.DB, "topic = 'broken' AND status = 3 AND retry_count = 3 AND fail_reason LIKE '%CODE: 25%'"); n != 5 {
		t.Fatalf("%d dead rows with retry_count 3 and the broker's reason, want 5 (%s)", n, statusCounts(t, b.db.DB))
	}
	eventually(t, 10*time.Second, "healthy rows sent", func() bool {
		return countWhere(t, b.db.DB, "topic = 'healthy' AND status = 2") == 5
	})
}

// TestBadRowsGoDeadAtOnceWhileTheRestFlow covers rows written by plain SQL that the writer
// library would have refused: each is parked with its reason on the first pass.
func TestBadRowsGoDeadAtOnceWhileTheRestFlow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.MaxBodyBytes = 1000
	cfg.Router = relay.RouterFunc(func(topic, tag string) (relay.Route, bool) { return relay.Route{}, topic != "unrouted" })
	cfg.Unrouted = relay.UnroutedDead
	r := b.newRelay(t, cfg)
	bad := []struct{ msgID, topic, tag, content, props, reason string }{
		{"big", "orders", "", strings.Repeat("x", 1001), "", "body is 1001 bytes, over the limit of 1000"},
		{"topic", "bad topic!", "", "{}", "", "invalid topic"},
		{"tag", "orders", "a||b", "{}", "", "invalid tag"},
		{"props", "orders", "", "{}", "not json", "malformed properties"},
		{"reserved", "orders", "", "{}", `{"DELAY":"3"}`, "reserved"},
		{"timer-deliver", "orders", "", "{}", `{"TIMER_DELIVER_MS":"4102444800000"}`, "reserved"},
		{"timer-delay", "orders", "", "{}", `{"TIMER_DELAY_SEC":"3600"}`, "reserved"},
		{"dispatch", "orders", "", "{}", `{"INNER_MULTI_DISPATCH":"%LMQ%victim"}`, "reserved"},
		{"route", "unrouted", "", "{}", "", "no route for topic"},
	}
	for i := 0; i < 10; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("good-%d", i), Topic: "orders", Body: []byte("ok")})
		if i < len(bad) {
			c := bad[i]
			if _, err := b.db.Exec(`INSERT INTO local_message (msg_id, topic, tag, content, properties) VALUES (?, ?, ?, ?, NULLIF(?, ''))`,
				c.msgID, c.topic, c.tag, c.content, c.props); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	st, err := r.DrainOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 10 || st.Dead != len(bad) {
		t.Fatalf("one pass: %+v, want 10 sent and %d dead", st, len(bad))
	}
	for _, c := range bad {
		var status, retries int
		var reason string
		if err := b.db.QueryRow("SELECT status, retry_count, fail_reason FROM local_message WHERE msg_id = ?", c.msgID).Scan(&status, &retries, &reason); err != nil {
			t.Fatal(err)
		}
		if status != 3 || retries != 0 || !strings.Contains(reason, c.reason) {
			t.Errorf("row %s: status %d retries %d reason %q, want dead at once saying %q", c.msgID, status, retries, reason, c.reason)
		}
	}
	if n := b.broker.Count("orders"); n != 10 {
		t.Fatalf("broker has %d orders messages, want the 10 good ones", n)
	}
}

// TestOrderedRoutePreservesPerKeyOrderUnderFailures: with a third of the sends refused, the
// messages of each sharding key still land on one queue in id order.
func TestOrderedRoutePreservesPerKeyOrderUnderFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Backoff.Base = 10 * time.Millisecond
	cfg.Backoff.Max = 50 * time.Millisecond
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "order-events", Route: relay.Route{Ordered: true, SendTimeout: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Router = router
	cfg.BatchSize = 64 // several batches, so keys span batches
	b.broker.SetTopicFaults("order-events", rmqtest.Faults{ErrorRate: 0.3, DropAfterStore: 0.01})
	const keys, perKey = 20, 30
	var msgs []outbox.Message
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			msgs = append(msgs, outbox.Message{
				MsgID: fmt.Sprintf("k%02d-%03d", k, i), Topic: "order-events", ShardingKey: fmt.Sprintf("order-%02d", k),
				Body: []byte(strconv.Itoa(i)), MaxRetries: 1000,
			})
		}
	}
	b.insert(t, msgs...)
	run(t, b.newRelay(t, cfg))
	eventually(t, 90*time.Second, "all ordered rows sent", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == keys*perKey
	})
	if n := countWhere(t, b.db.DB, "fail_reason IS NOT NULL"); n == 0 {
		t.Fatal("no failure was injected; the test proves nothing")
	}
	queueOf := map[string]int{}
	seqs := map[string][]int{}
	for _, m := range b.broker.Messages("order-events") {
		key := m.Properties["SHARDING_KEY"]
		if q, ok := queueOf[key]; ok && q != m.QueueID {
			t.Fatalf("key %s on queues %d and %d", key, q, m.QueueID)
		}
		queueOf[key] = m.QueueID
		n, _ := strconv.Atoi(string(m.Body))
		seqs[key] = append(seqs[key], n)
	}
	for k, seq := range seqs {
		// A lost ack re-sends the same message (a duplicate), never a later one first.
		next := 0
		for _, n := range seq {
			switch {
			case n == next:
				next++
			case n == next-1: // duplicate of the last one
			default:
				t.Fatalf("key %s out of order: %v", k, seq)
			}
		}
		if next != perKey {
			t.Fatalf("key %s delivered %d of %d", k, next, perKey)
		}
	}
}

// TestPermanentPublisherErrorGoesDead checks that a permanent SendError parks the row at once.
func TestPermanentPublisherErrorGoesDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pub := failingPublisher{err: &relay.SendError{Kind: relay.SendPermanent, Code: -1, Err: errors.New("topic forbidden by ACL")}}
	r, err := relay.New(b.db.DB, b.rdb, pub, b.config())
	if err != nil {
		t.Fatal(err)
	}
	b.insert(t, outbox.Message{MsgID: "acl", Topic: "orders", Body: []byte("x")})
	ctx := context.Background()
	if st, err := r.DrainOnce(ctx); err != nil || st.Dead != 1 {
		t.Fatalf("DrainOnce = %+v, %v; want 1 dead", st, err)
	}
	if n := countWhere(t, b.db.DB, "status = 3 AND retry_count = 0 AND fail_reason LIKE '%topic forbidden by ACL%'"); n != 1 {
		t.Fatalf("row not dead with the publisher's reason (%s)", statusCounts(t, b.db.DB))
	}
}

type failingPublisher struct{ err error }

func (f failingPublisher) Send(context.Context, relay.Route, ...*relay.Message) error { return f.err }
func (f failingPublisher) Close() error                                               { return nil }

// TestRefusedBatchFallsBackToSingleSends: the broker refuses a whole batch because one of its
// messages is over its size limit (a limit the relay's own check does not know); the relay
// sends the batch's messages one by one, so only that message goes dead.
func TestRefusedBatchFallsBackToSingleSends(t *testing.T) {
	t.Parallel()
	b := setupWith(t, rmqtest.Options{MaxMessageSize: 1000})
	r := b.newRelay(t, b.config())
	var msgs []outbox.Message
	for i := 0; i < 20; i++ {
		body := []byte("small")
		if i == 7 {
			body = []byte(strings.Repeat("x", 2000))
		}
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("b%02d", i), Topic: "orders", Body: body})
	}
	b.insert(t, msgs...)
	ctx := context.Background()
	st, err := r.DrainOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != 19 || st.Dead != 1 || st.Retried != 0 {
		t.Fatalf("one pass: %+v, want 19 sent and 1 dead", st)
	}
	if n := countWhere(t, b.db.DB, "msg_id = 'b07' AND status = 3 AND fail_reason LIKE '%refused by the broker%'"); n != 1 {
		t.Fatalf("the oversized message is not dead with the broker's refusal (%s)", statusCounts(t, b.db.DB))
	}
	if n := b.broker.Count("orders"); n != 19 {
		t.Fatalf("broker stored %d messages, want the 19 others", n)
	}
}
