// SPDX-License-Identifier: Apache-2.0

package auditor_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// rig is a migrated table relayed to an rmqtest broker.
type rig struct {
	db     *testenv.DB
	broker *rmqtest.Server
	writer *outbox.Writer
	router relay.Router
}

func newRig(t *testing.T) *rig {
	t.Helper()
	db, broker := auditor.AuditTable(t, "orders", "events")
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "orders", Route: relay.Route{Ordered: true}}, relay.PatternRule{Topic: "*"})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{db: db, broker: broker, writer: w, router: router}
}

// runRelay runs a relay of the table until the test ends.
func (g *rig) runRelay(t *testing.T) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{g.broker.NameServerAddr()}, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	r, err := relay.New(g.db.DB, rdb, pub, relay.Config{RecordPositions: true,
		PollInterval: 50 * time.Millisecond, DisableNudge: true, Router: g.router,
		Backoff: backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
		LockKey: prefix + "lock", LockTTL: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// insert writes n rows: on "orders" (an ordered route) with five sharding keys, or on
// "events".
func (g *rig) insert(t *testing.T, topic, prefix string, n int) {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%04d", prefix, i), Topic: topic, Body: []byte("event " + prefix)}
		if topic == "orders" {
			msgs[i].ShardingKey = fmt.Sprintf("order-%d", i%5)
		}
	}
	if err := g.writer.InsertNoTx(context.Background(), g.db.DB, msgs); err != nil {
		t.Fatal(err)
	}
}

func (g *rig) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := g.db.QueryRow("SELECT COUNT(*) FROM local_message WHERE " + where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// recorded returns how many rows' positions the journal holds.
func (g *rig) recorded(t *testing.T) int {
	t.Helper()
	var n int
	if err := g.db.QueryRow("SELECT COALESCE(SUM(row_count), 0) FROM local_message_stored").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// atBroker returns how many copies of each OUTBOX_MSG_ID the broker holds.
func (g *rig) atBroker() map[string]int {
	out := map[string]int{}
	for _, topic := range []string{"orders", "events"} {
		for _, m := range g.broker.Messages(topic) {
			out[m.Properties[outbox.MsgIDProperty]]++
		}
	}
	return out
}

// The broker acknowledges messages and then loses them, two ways: a queue truncated below
// acknowledged offsets (later sends reuse the offsets, so other messages sit there), and a
// failover to a replica that lacks everything acknowledged since its copy. With the auditor
// running beside the relay, every lost row is found and sent again within the audit's
// bound, no row is lost, and a consumer deduping with idempotency.SQLGuard applies each
// event exactly once, although the broker holds some events twice.
func TestLostAfterAcknowledgementSentAgain(t *testing.T) {
	g := newRig(t)
	g.runRelay(t)
	const before, after = 120, 150
	g.insert(t, "orders", "o1", before/2)
	g.insert(t, "events", "e1", before/2)
	testenv.Eventually(t, 30*time.Second, "first rows sent", func() bool { return g.count(t, "status = 2") == before })
	// The unflushed tail of two queues is lost: everything from offset 3 on.
	lostTail := 0
	for _, topic := range []string{"orders", "events"} {
		n, err := g.broker.TruncateQueue(topic, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		lostTail += n
	}
	snap := g.broker.Snapshot()
	g.insert(t, "orders", "o2", after/2)
	g.insert(t, "events", "e2", after/2)
	total := before + after
	testenv.Eventually(t, 30*time.Second, "second rows sent", func() bool { return g.count(t, "status = 2") == total })
	if err := g.broker.Failover(snap); err != nil { // everything acknowledged since the snapshot is gone
		t.Fatal(err)
	}
	if lost := total - len(g.atBroker()); lost < after || lostTail == 0 {
		t.Fatalf("the broker lost %d messages (%d of its tail); want the %d sent after the snapshot and a tail", lost, lostTail, after)
	}

	reg := prometheus.NewRegistry()
	metrics := auditor.NewMetrics(reg)
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{g.broker.NameServerAddr()}})
	logs := &testenv.SyncBuffer{}
	a, err := auditor.New(g.db.DB, lookup, auditor.Config{
		Database: "test", Table: "local_message", MinAge: 200 * time.Millisecond, MaxAge: time.Hour,
		Rate: 5000, Batch: 50, Idle: 100 * time.Millisecond, Metrics: metrics, Log: zerolog.New(logs),
		Ordered: func(topic, tag string) bool { r, _ := g.router.Route(topic, tag); return r.Ordered },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// Bound: a row is checked at most MinAge + a round of the window (270 rows at 5,000/s)
	// + Idle after it was sent; re-sent on the relay's next poll; its copy checked one round
	// later. 30 s leaves room for a loaded machine, never for a row left behind.
	testenv.Eventually(t, 30*time.Second, "every row sent and found at the broker", func() bool {
		return auditor.AuditedRows(t, g.db.DB, "local_message") == total
	})
	held := g.atBroker()
	for _, prefix := range []string{"o1", "e1", "o2", "e2"} {
		for i := 0; i < map[bool]int{true: before / 2, false: after / 2}[prefix[1] == '1']; i++ {
			if id := fmt.Sprintf("%s-%04d", prefix, i); held[id] == 0 {
				t.Errorf("%s: acknowledged, marked sent, and not at the broker", id)
			}
		}
	}
	repaired := counter(t, reg, "outbox_relay_audit_repaired_total", "")
	missing := counter(t, reg, "outbox_relay_audit_missing_total", "")
	if lostNow := float64(total - len(held)); lostNow != 0 || repaired < float64(after) || repaired != missing {
		t.Errorf("repaired %v, missing %v, still lost %v; want every lost row (at least %d) repaired", repaired, missing, lostNow, after)
	}
	// The in-memory state the dashboard shows counts what the series count.
	if s := a.State(); !s.Ready || !s.Owner || float64(s.Repaired) != repaired || float64(s.Missing) != missing ||
		float64(s.Checked) != counter(t, reg, "outbox_relay_audit_checked_total", "") || float64(s.RepairedOrdered) != counter(t, reg, "outbox_relay_audit_repaired_total", "true") {
		t.Errorf("state %+v; series: repaired %v, missing %v", s, repaired, missing)
	}
	if counter(t, reg, "outbox_relay_audit_repaired_total", "true") == 0 {
		t.Errorf("no ordered row counted as repaired; logs: %s", logs.String())
	}
	consumeOnce(t, g)
}

// consumeOnce delivers every message the broker holds, copies included, to a consumer
// deduping with idempotency.SQLGuard on the message's OUTBOX_MSG_ID, and checks that each
// event was applied exactly once.
func consumeOnce(t *testing.T, g *rig) {
	t.Helper()
	ddl, _ := schema.DedupeDDL(schema.DedupeDefaultTable)
	if _, err := g.db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	if _, err := g.db.Exec("CREATE TABLE applied (msg_id varchar(64) NOT NULL, n int NOT NULL, PRIMARY KEY (msg_id))"); err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "audit-consumer"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, topic := range []string{"orders", "events"} {
		for _, m := range g.broker.Messages(topic) {
			id := m.Properties[outbox.MsgIDProperty]
			if _, err := guard.Do(ctx, g.db.DB, topic+":"+id, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO applied (msg_id, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", id)
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var events, twice int
	if err := g.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(n > 1), 0) FROM applied").Scan(&events, &twice); err != nil {
		t.Fatal(err)
	}
	if want := g.count(t, "1 = 1"); events != want || twice != 0 {
		t.Errorf("consumer applied %d events (%d more than once); want each of the %d exactly once", events, twice, want)
	}
}

// counter is auditor.Counter.
var counter = auditor.Counter

// Audit (`outbox-relay audit`) on a range: a dry run lists exactly the rows the broker lost
// and changes nothing; with Repair they are made due again with the broker's reason, their
// retry count untouched, and the relay sends them again.
func TestAuditDryRunThenRepair(t *testing.T) {
	g := newRig(t)
	g.runRelay(t)
	g.insert(t, "events", "e", 80)
	testenv.Eventually(t, 30*time.Second, "rows sent", func() bool { return g.count(t, "status = 2") == 80 })
	// The relay appends the rows' positions to the journal shortly after it marks them sent.
	testenv.Eventually(t, 10*time.Second, "positions recorded", func() bool { return g.recorded(t) == 80 })
	perQueue := map[int]int64{}
	fullest := 0
	for _, m := range g.broker.Messages("events") {
		perQueue[m.QueueID]++
		if perQueue[m.QueueID] > perQueue[fullest] {
			fullest = m.QueueID
		}
	}
	lost, err := g.broker.TruncateQueue("events", fullest, perQueue[fullest]/2)
	if err != nil || lost == 0 {
		t.Fatalf("truncated %d messages: %v; want some", lost, err)
	}
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{g.broker.NameServerAddr()}})
	a, err := auditor.New(g.db.DB, lookup, auditor.Config{Database: "test", Table: "local_message", Rate: 10000, Batch: 30})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rg := auditor.Range{From: time.Now().Add(-time.Hour), Topic: "events"}
	rep, err := a.Audit(ctx, rg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 80 || rep.Missing != lost || rep.Present != 80-lost || rep.Repaired != 0 || len(rep.Lost) != lost {
		t.Fatalf("dry run: %+v; want 80 checked, the %d lost missing, nothing repaired", rep, lost)
	}
	if n, audited := g.count(t, "status = 2"), auditor.AuditedRows(t, g.db.DB, "local_message"); n != 80 || audited != 0 {
		t.Fatalf("the dry run changed rows: %d of 80 still sent, %d audited", n, audited)
	}
	if rep, err := a.Audit(ctx, auditor.Range{From: time.Now().Add(-time.Hour), Topic: "orders"}); err != nil || rep.Checked != 0 {
		t.Fatalf("--topic orders checked %d rows (%v); want none", rep.Checked, err)
	}
	rg.Repair = true
	if rep, err = a.Audit(ctx, rg); err != nil || rep.Repaired != lost {
		t.Fatalf("repair: %+v, %v; want %d repaired", rep, err, lost)
	}
	testenv.Eventually(t, 30*time.Second, "repaired rows sent again", func() bool {
		return g.count(t, "status = 2 AND retry_count = 0") == 80 && len(g.atBroker()) == 80
	})
	if n := g.count(t, "fail_reason LIKE 'lost by broker % after acknowledgement: %'"); n != lost {
		t.Errorf("%d rows keep the reason of the repair, want %d", n, lost)
	}
	if n := g.count(t, "fail_reason LIKE '%after acknowledgement%after acknowledgement%'"); n != 0 {
		t.Errorf("%d rows' reason says twice that the broker lost them", n)
	}
}
