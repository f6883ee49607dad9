// SPDX-License-Identifier: Apache-2.0

package brokeraudit_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

// relayBroker is the 5.3.3 broker the relay end-to-end test sends to and then loses: its
// own (port 19931, with 19929 and 19932), never broker-a (nor broker-audit, which the
// lookup tests kill and wipe).
const relayBroker = "broker-auditrelay"

func relayBrokerPort() string {
	if v := os.Getenv("OUTBOX_TEST_ROCKETMQ_AUDIT_RELAY_PORT"); v != "" {
		return v
	}
	return "19931"
}

// The relay's audit settings in TestRelayAuditRepairsLostStore: MinAge is long enough that
// the broker is killed before the audit reaches the rows (a row found present is not checked
// again: the audit finds what was lost before it looked), short enough for a test.
const (
	e2eMinAge = 15 * time.Second
	e2eIdle   = 500 * time.Millisecond
	e2eRate   = 2000
	e2ePoll   = 100 * time.Millisecond
	e2eRows   = 300
	e2eOrders = 10
)

// TestRelayAuditRepairsLostStore: on Apache RocketMQ 5.3.3, a relay with its auditor on
// sends rows to a broker of the test's own; a consumer deduping with idempotency.SQLGuard
// applies them; the broker is killed (-9), its store removed, and it comes back empty (its
// topic created again). Every row acknowledged before the loss is found missing by the audit
// and sent again, with its msg_id, within min_age + one audit pass + the relay's poll of the
// broker's return; none is lost (the broker holds every row again, each found present), and
// the consumer, reading the new store too, has applied each event exactly once, per order.
func TestRelayAuditRepairsLostStore(t *testing.T) {
	ns, addr, topic := startOwnBroker(t, relayBroker, relayBrokerPort(), "audit_relay_")
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	ddl, err := schema.StoredLogDDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	runRelayWithAudit(t, db.DB, ns, auditor.NewMetrics(reg))
	writeOrders(t, db.DB, topic)
	testenv.Eventually(t, 60*time.Second, "every row sent", func() bool { return countRows(t, db.DB, "status = 2") == e2eRows })
	c := newGuardedConsumer(t, db.DB, addr, topic)
	if n := c.consume(t); n != e2eRows {
		t.Fatalf("the consumer read %d messages before the loss; want %d", n, e2eRows)
	}
	if n := auditedRows(t, db.DB); n != 0 {
		t.Fatalf("%d rows were found present before the broker was killed: min_age %v is too short for this machine", n, e2eMinAge)
	}

	runScript(t, "broker-kill", relayBroker)
	runScript(t, "broker-wipe", relayBroker)
	runScript(t, "broker-start", relayBroker, relayBrokerPort())
	createTopic(t, ns, addr, relayBroker, topic, nil)
	back := time.Now()

	// The bound: a lost row is looked at min_age after it was sent (already past, or not,
	// when the broker is back), at the latest after the pass under way and the idle pause
	// (a pass of every row at the audit's rate), and sent on the relay's next poll.
	bound := e2eMinAge + e2eIdle + time.Duration(float64(e2eRows)/e2eRate*float64(time.Second)) + e2ePoll
	last := time.Now()
	testenv.Eventually(t, bound, "every lost row found and sent again", func() bool {
		if time.Since(last) > 2*time.Second {
			last = time.Now()
			t.Logf("%v after: %s", time.Since(back).Round(time.Millisecond), rowStates(t, db.DB))
		}
		return heldIDs(t, addr, topic) == e2eRows
	})
	t.Logf("every lost row sent again %v after the broker was back (bound %v)", time.Since(back).Round(time.Millisecond), bound)
	testenv.Eventually(t, bound+e2eMinAge, "every row sent again found present", func() bool {
		return auditedRows(t, db.DB) == e2eRows
	})
	if n := repairedTotal(t, reg); n != e2eRows {
		t.Errorf("the audit repaired %v rows; want each of the %d once", n, e2eRows)
	}
	if n := c.consume(t); n != e2eRows {
		t.Errorf("the new store holds %d messages; want the %d rows, each sent again once", n, e2eRows)
	}
	c.appliedOnce(t)
}

// runRelayWithAudit runs a relay of local_message, publishing through the name server ns,
// and its auditor (the relay's one partition's holder), until the test ends.
func runRelayWithAudit(t *testing.T, db *sql.DB, ns string, m *auditor.Metrics) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{ns}, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "*", Route: relay.Route{Ordered: true}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(db, rdb, pub, relay.Config{RecordPositions: true,
		PollInterval: e2ePoll, DisableNudge: true, Router: router,
		Backoff: backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
		LockKey: prefix + "lock", LockTTL: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auditor.New(db, brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{ns}}), auditor.Config{
		Database: "test", Table: "local_message", MinAge: e2eMinAge, MaxAge: time.Hour,
		Rate: e2eRate, Batch: 100, Idle: e2eIdle, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel),
		Ordered: func(string, string) bool { return true }, Metrics: m,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { _ = r.Run(ctx); done <- struct{}{} }()
	go func() { _ = a.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() { cancel(); <-done; <-done })
}

// writeOrders writes e2eRows rows of topic, e2eOrders orders' events in turn.
func writeOrders(t *testing.T, db *sql.DB, topic string) {
	t.Helper()
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, e2eRows)
	for i := range msgs {
		order := fmt.Sprintf("order-%d", i%e2eOrders)
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("ev-%04d", i), Topic: topic, ShardingKey: order, Body: []byte(order)}
	}
	if err := w.InsertNoTx(context.Background(), db, msgs); err != nil {
		t.Fatal(err)
	}
}

// repairedTotal is outbox_relay_audit_repaired_total, summed over its series.
func repairedTotal(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == "outbox_relay_audit_repaired_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// rowStates says how many rows are in each status, repaired or not, audited or not.
func rowStates(t *testing.T, db *sql.DB) string {
	t.Helper()
	rows, err := db.Query("SELECT status, COALESCE(fail_reason, '') LIKE 'lost by broker%', COUNT(*) FROM local_message GROUP BY 1, 2")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := ""
	for rows.Next() {
		var status, repaired, n int
		if err := rows.Scan(&status, &repaired, &n); err != nil {
			t.Fatal(err)
		}
		out += fmt.Sprintf("[status %d repaired %d: %d] ", status, repaired, n)
	}
	return out + fmt.Sprintf("audited %d", auditedRows(t, db))
}

// auditedRows returns how many rows of local_message are still sent by a send whose journal
// entry the audit has finished: the rows found at the broker.
func auditedRows(t *testing.T, db *sql.DB) int {
	t.Helper()
	j, err := storedlog.Open(db, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := j.Window(context.Background(), 0, 1<<62, storedlog.Cursor{}, true, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	audited := map[[2]int64]bool{} // id, settled time
	for _, e := range entries {
		for _, p := range e.Positions {
			audited[[2]int64{p.ID, e.SettledMs}] = e.AuditedMs > 0
		}
	}
	rows, err := db.Query("SELECT id, next_retry_time FROM local_message WHERE status = 2")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var k [2]int64
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			t.Fatal(err)
		}
		if audited[k] {
			n++
		}
	}
	return n
}

func countRows(t *testing.T, db *sql.DB, where string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE " + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// guardedConsumer reads every queue of a topic from a broker and applies each message once
// per OUTBOX_MSG_ID through idempotency.SQLGuard: it counts the message's order's events.
type guardedConsumer struct {
	db          *sql.DB
	addr, topic string
	guard       *idempotency.SQLGuard
}

func newGuardedConsumer(t *testing.T, db *sql.DB, addr, topic string) *guardedConsumer {
	t.Helper()
	ddl, _ := schema.DedupeDDL(schema.DedupeDefaultTable)
	for _, q := range []string{ddl,
		"CREATE TABLE applied (msg_id varchar(64) NOT NULL, order_id varchar(64) NOT NULL, n int NOT NULL, PRIMARY KEY (msg_id))"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "audit-relay-consumer"})
	if err != nil {
		t.Fatal(err)
	}
	return &guardedConsumer{db: db, addr: addr, topic: topic, guard: guard}
}

// consume applies every message the topic's queues hold, from their first offsets, and
// returns how many messages it read.
func (c *guardedConsumer) consume(t *testing.T) int {
	t.Helper()
	read := 0
	readTopic(t, c.addr, c.topic, func(m *remoting.Message) {
		c.apply(context.Background(), t, m)
		read++
	})
	return read
}

// readTopic pulls every message of the topic's four queues from the broker at addr, from
// their first offsets to their ends, and hands each to fn.
func readTopic(t *testing.T, addr, topic string, fn func(*remoting.Message)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for q := 0; q < 4; q++ {
		for off := int64(0); ; {
			p, err := conn.Pull(ctx, "audit-relay-consumer", topic, q, off, 32)
			if err != nil {
				t.Fatalf("pull queue %d of %s at %d: %v", q, topic, off, err)
			}
			for _, m := range p.Messages {
				fn(m)
			}
			if len(p.Messages) == 0 || p.Next <= off {
				break
			}
			off = p.Next
		}
	}
}

// heldIDs returns how many distinct OUTBOX_MSG_IDs the topic's queues hold.
func heldIDs(t *testing.T, addr, topic string) int {
	t.Helper()
	ids := map[string]bool{}
	readTopic(t, addr, topic, func(m *remoting.Message) { ids[m.Properties[outbox.MsgIDProperty]] = true })
	return len(ids)
}

func (c *guardedConsumer) apply(ctx context.Context, t *testing.T, m *remoting.Message) {
	t.Helper()
	id := m.Properties[outbox.MsgIDProperty]
	if _, err := c.guard.Do(ctx, c.db, c.topic+":"+id, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO applied (msg_id, order_id, n) VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE n = n + 1", id, string(m.Body))
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// appliedOnce checks that every row's event was applied exactly once, and each order's
// events all and once.
func (c *guardedConsumer) appliedOnce(t *testing.T) {
	t.Helper()
	rows, err := c.db.Query("SELECT order_id, COUNT(*), SUM(n) FROM applied GROUP BY order_id ORDER BY order_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	orders := 0
	for rows.Next() {
		var order string
		var events, applied int
		if err := rows.Scan(&order, &events, &applied); err != nil {
			t.Fatal(err)
		}
		orders++
		if want := e2eRows / e2eOrders; events != want || applied != want {
			t.Errorf("%s: %d events applied %d times; want %d, each once", order, events, applied, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if orders != e2eOrders {
		t.Errorf("events of %d orders applied; want %d", orders, e2eOrders)
	}
}
