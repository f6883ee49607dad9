// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// Tests of issue 9: the relay under the conditions of a production database and broker.

// TestRelayNeverWaitsForOpenWriterTransactions: a writer holds a transaction with an
// uncommitted outbox row open for longer than any relay timeout, on a table whose history
// (20,000 sent rows) makes the (status, ...) indexes attractive to the optimizer. Rows that
// other writers commit meanwhile are sent; no writer statement is blocked by the relay (each
// runs with a 1 s lock wait timeout, so a wait would be an error); the held row is sent once
// committed.
func TestRelayNeverWaitsForOpenWriterTransactions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var ins strings.Builder
	for start := 0; start < 20000; start += 2000 {
		ins.Reset()
		ins.WriteString("INSERT INTO local_message (msg_id, topic, content, status, sent_time) VALUES ")
		for i := start; i < start+2000; i++ {
			if i > start {
				ins.WriteString(",")
			}
			fmt.Fprintf(&ins, "('old-%d', 'orders', 'x', 2, 1)", i)
		}
		if _, err := b.db.Exec(ins.String()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.db.Exec("ANALYZE TABLE local_message"); err != nil {
		t.Fatal(err)
	}

	// writerConn returns a connection whose statements give up after 1 s of lock wait.
	writerConn := func() *sql.Conn {
		c, err := b.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			t.Fatal(err)
		}
		return c
	}
	held := writerConn()
	heldTx, err := held.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer heldTx.Rollback()
	heldSince := time.Now()
	if err := b.writer.Insert(ctx, heldTx, &outbox.Message{MsgID: "held-1", Topic: "orders", Body: []byte("h1")}); err != nil {
		t.Fatal(err)
	}

	cfg := b.config()
	cfg.QueryTimeout = time.Second // a relay statement that waited would fail, and its rows stay unsent
	run(t, b.newRelay(t, cfg))

	const writers, perWriter = 4, 50
	var writeErrs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		c := writerConn()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perWriter; i++ {
				tx, err := c.BeginTx(ctx, nil)
				if err == nil {
					err = b.writer.Insert(ctx, tx, &outbox.Message{MsgID: fmt.Sprintf("w%d-%d", w, i), Topic: "orders", Body: []byte("y")})
					if err == nil {
						err = tx.Commit()
					} else {
						tx.Rollback()
					}
				}
				if err != nil {
					mu.Lock()
					writeErrs = append(writeErrs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(writeErrs) > 0 {
		t.Fatalf("%d writer statements failed beside the relay, first: %v", len(writeErrs), writeErrs[0])
	}
	eventually(t, 30*time.Second, "the rows committed around the open transaction to be sent", func() bool {
		return countWhere(t, b.db.DB, "msg_id LIKE 'w%' AND status = 2") == writers*perWriter
	})
	// Hold on past every relay timeout, with the relay polling throughout.
	eventually(t, 10*time.Second, "the held transaction to outlive the relay's timeouts", func() bool {
		return time.Since(heldSince) > 3*cfg.QueryTimeout
	})
	if err := b.writer.Insert(ctx, heldTx, &outbox.Message{MsgID: "held-2", Topic: "orders", Body: []byte("h2")}); err != nil {
		t.Fatalf("the held transaction's second insert: %v", err)
	}
	if err := heldTx.Commit(); err != nil {
		t.Fatalf("commit of the held transaction: %v", err)
	}
	eventually(t, 30*time.Second, "the held transaction's rows to be sent", func() bool {
		return countWhere(t, b.db.DB, "msg_id LIKE 'held-%' AND status = 2") == 2
	})
	if n := countWhere(t, b.db.DB, "status <> 2"); n != 0 {
		t.Fatalf("%d rows not sent (%s)", n, statusCounts(t, b.db.DB))
	}
}

// TestDroppedConnectionsKillNoMessage: the broker drops connections again and again while
// many batches are in flight (a dropped connection fails everything in flight on it, and
// some drops come after the message was stored: lost acks). Every message is delivered and
// none is dead, with the default max_retry_count.
func TestDroppedConnectionsKillNoMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.BatchSize = 200
	cfg.MaxBatchMessages = 16 // many requests in flight at once
	b.broker.SetFaults(rmqtest.Faults{DropBeforeStore: 0.03, DropAfterStore: 0.03})
	const n = 3000
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("d%05d", i), Topic: "orders", Body: []byte(fmt.Sprint(i))}
	}
	b.insert(t, msgs...)
	run(t, b.newRelay(t, cfg))
	eventually(t, 120*time.Second, "every row sent or dead", func() bool {
		return countWhere(t, b.db.DB, "status IN (2, 3)") == n
	})
	if dead := countWhere(t, b.db.DB, "status = 3"); dead != 0 {
		var reason string
		b.db.QueryRow("SELECT fail_reason FROM local_message WHERE status = 3 LIMIT 1").Scan(&reason)
		t.Fatalf("%d messages dead through dropped connections, e.g. %q", dead, reason)
	}
	ids := map[string]bool{}
	stored := b.broker.Messages("orders")
	for _, m := range stored {
		ids[m.Properties[outbox.MsgIDProperty]] = true
	}
	if len(ids) != n {
		t.Fatalf("broker has %d distinct messages, want %d", len(ids), n)
	}
	// A lost ack is sent again (at once, on a new connection): copies show the faults were
	// injected. Failures are no proof any more: most dropped sends are re-sent before they
	// fail.
	if len(stored) == n {
		t.Fatal("no ack was lost: the faults were not injected and the test proves nothing")
	}
}

// countingPublisher counts the sends of each message it passes on to the real publisher.
type countingPublisher struct {
	relay.Publisher
	mu     sync.Mutex
	counts map[string]int
}

func (p *countingPublisher) Send(ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
	p.mu.Lock()
	for _, m := range msgs {
		p.counts[m.MsgID]++
	}
	p.mu.Unlock()
	return p.Publisher.Send(ctx, route, msgs...)
}

func (p *countingPublisher) count(msgID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[msgID]
}

// TestAlwaysRefusedMessageDeadAfterMaxRetriesPlusOneAttempts: a message the broker always
// refuses while its neighbours are accepted goes dead after exactly max_retry_count + 1
// attempts, with the broker's reason.
func TestAlwaysRefusedMessageDeadAfterMaxRetriesPlusOneAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Backoff.Base = 20 * time.Millisecond
	cfg.Backoff.Max = 50 * time.Millisecond
	pub := &countingPublisher{Publisher: b.pub, counts: map[string]int{}}
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.broker.SetTopicFaults("poison", rmqtest.Faults{ErrorRate: 1, ErrorCode: 25})
	b.insert(t, outbox.Message{MsgID: "poison-1", Topic: "poison", Body: []byte("p"), MaxRetries: 2})
	for i := 0; i < 20; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("n%02d", i), Topic: "orders", Body: []byte("n")})
	}
	run(t, r)
	eventually(t, 30*time.Second, "the refused message dead and its neighbours sent", func() bool {
		return countWhere(t, b.db.DB, "msg_id = 'poison-1' AND status = 3") == 1 &&
			countWhere(t, b.db.DB, "topic = 'orders' AND status = 2") == 20
	})
	if got := pub.count("poison-1"); got != 3 {
		t.Fatalf("the refused message was attempted %d times, want max_retry_count + 1 = 3", got)
	}
	if n := countWhere(t, b.db.DB, "msg_id = 'poison-1' AND retry_count = 3 AND fail_reason LIKE '%CODE: 25%'"); n != 1 {
		t.Fatal("the dead message does not carry its 3 attempts and the broker's reason")
	}
}

// TestMissingTopicDoesNotStopTheTable: on a cluster with autoCreateTopicEnable=false, a row
// with a misspelt topic is that topic's problem: the other rows are sent at once, and the
// misspelt one says why it fails and goes dead after its attempts.
func TestMissingTopicDoesNotStopTheTable(t *testing.T) {
	t.Parallel()
	b := setupWith(t, rmqtest.Options{Topics: []string{"orders"}})
	cfg := b.config()
	cfg.Backoff.Base = 20 * time.Millisecond
	cfg.Backoff.Max = 50 * time.Millisecond
	b.insert(t, outbox.Message{MsgID: "typo", Topic: "ordres", Body: []byte("t"), MaxRetries: 1})
	for i := 0; i < 20; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("o%02d", i), Topic: "orders", Body: []byte("o")})
	}
	run(t, b.newRelay(t, cfg))
	eventually(t, 30*time.Second, "the other rows sent", func() bool {
		return countWhere(t, b.db.DB, "topic = 'orders' AND status = 2") == 20
	})
	eventually(t, 30*time.Second, "the misspelt row dead after its attempts", func() bool {
		return countWhere(t, b.db.DB, "msg_id = 'typo' AND status = 3 AND retry_count = 2") == 1
	})
	var reason string
	if err := b.db.QueryRow("SELECT fail_reason FROM local_message WHERE msg_id = 'typo'").Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "ordres") || !strings.Contains(reason, "route") {
		t.Fatalf("the dead row's reason %q does not name the topic and its missing route", reason)
	}
}

// topicPublisher sends each topic through the publisher of its own cluster, as a service
// publishing to two RocketMQ clusters would.
type topicPublisher map[string]relay.Publisher

func (p topicPublisher) Send(ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
	return p[msgs[0].Topic].Send(ctx, route, msgs...)
}
func (p topicPublisher) Close() error { return nil }

// secondBroker starts another test broker, "east", and returns it with a publisher to it
// (send timeout sendTimeout) whose route to topic east is fetched and connection open, by
// one send, so that a fault the test sets next hits sends, not the route lookup.
func secondBroker(t *testing.T, sendTimeout time.Duration) (*rmqtest.Server, *rocketmq.Publisher) {
	t.Helper()
	east, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(east.Close)
	eastPub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{east.NameServerAddr()}, SendTimeout: sendTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eastPub.Close() })
	if err := eastPub.Send(context.Background(), relay.Route{}, &relay.Message{MsgID: "warm", Topic: "east", Body: []byte("w")}); err != nil {
		t.Fatal(err)
	}
	return east, eastPub
}

// TestOneBrokerDownDoesNotStopTheOthersRows: with one broker of two unreachable, the rows
// for the other are sent at once; the rows for the down broker wait with their retry counts
// untouched and are sent when it is back. Nothing goes dead.
func TestOneBrokerDownDoesNotStopTheOthersRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The east broker goes down after its route is known, as a broker dies in production.
	east, eastPub := secondBroker(t, 2*time.Second)
	pub := topicPublisher{"east": eastPub, "west": b.pub}
	east.StopBroker()
	for i := 0; i < 30; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("e%02d", i), Topic: "east", Body: []byte("e")},
			outbox.Message{MsgID: fmt.Sprintf("w%02d", i), Topic: "west", Body: []byte("w")})
	}
	r, err := relay.New(b.db.DB, b.rdb, pub, b.config())
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	eventually(t, 30*time.Second, "the west rows sent while east is down", func() bool {
		return countWhere(t, b.db.DB, "topic = 'west' AND status = 2") == 30 &&
			countWhere(t, b.db.DB, "topic = 'east' AND status = 1 AND retry_count = 0 AND fail_reason LIKE '%unreachable%'") == 30
	})
	if err := east.StartBroker(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the east rows sent once their broker is back", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == 60
	})
	if n := east.Count("east"); n < 31 {
		t.Fatalf("east broker has %d messages, want the 30 rows and the warm-up", n)
	}
}

// TestFailingWriteBackStopsPublishingUntilTheDatabaseAcceptsWrites: a trigger refuses every
// UPDATE of the table (as a read-only primary or a missing grant would). The relay publishes
// the rows once, keeps their acknowledgements, publishes nothing again while the write-back
// fails, and marks them sent once the trigger is dropped.
func TestFailingWriteBackStopsPublishingUntilTheDatabaseAcceptsWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if _, err := b.db.Exec(`CREATE TRIGGER refuse_updates BEFORE UPDATE ON local_message FOR EACH ROW
		SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'updates refused by a trigger'`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("t%d", i), Topic: "orders", Body: []byte("t")})
	}
	cfg := b.config()
	reg := prometheus.NewRegistry()
	cfg.Metrics = relay.NewMetrics(reg)
	run(t, b.newRelay(t, cfg))
	eventually(t, 30*time.Second, "three refused write-backs", func() bool {
		return metric(t, reg, "outbox_relay_writeback_failures_total", nil) >= 3
	})
	if n := b.broker.Count("orders"); n != 5 {
		t.Fatalf("broker has %d messages while the write-back failed, want the 5 published once", n)
	}
	if _, err := b.db.Exec("DROP TRIGGER refuse_updates"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the rows marked sent once writes are accepted", func() bool {
		return countWhere(t, b.db.DB, "status = 2") == 5
	})
	if n := b.broker.Count("orders"); n != 5 {
		t.Fatalf("broker has %d messages, want 5: acknowledged rows were published again", n)
	}
}
