// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

const (
	topic      = "TxOrders"
	checkGroup = "outbox-tx"
	// checkSecret signs the tests' halves and is the responder's secret.
	checkSecret = "txcheck-test-secret-0123"
	table       = "local_message"
)

var instanceSeq atomic.Int64

// world is a database with the outbox table, the test broker, a half-message writer, and
// (on demand) a relay and a check responder, as they run in production.
type world struct {
	t      *testing.T
	ctx    context.Context
	db     *testenv.DB
	rdb    *redis.Client
	prefix string
	broker *rmqtest.Server
	tp     *txmsg.Producer
	sender txmsg.Sender    // tp's producer
	handed *txmsg.Producer // handedWriter's
	reg    *prometheus.Registry
	resp   *txcheck.Responder
	// endGrace is the responder's EndGrace: none unless a test sets it, since the tests
	// trigger checks by hand and a handed row is always younger than the default.
	endGrace time.Duration
	// hold, workers and queueSize set the responder's worker gate (HoldAnswers), Workers
	// and QueueSize when not zero.
	hold               chan struct{}
	workers, queueSize int
	// fence is the responder's Fence; discardSettle its DiscardSettle (none unless set).
	fence         bool
	discardSettle time.Duration
	// nameServers are those of the writer and the relay; tls is the responder's TLS (it
	// dials the broker itself).
	nameServers []string
	tls         *tls.Config
}

func setup(t *testing.T, opts rmqtest.Options, grace time.Duration) *world {
	t.Helper()
	return setupVia(t, opts, grace, nil)
}

// setupVia is setup whose writer and relay reach the broker through the name servers via
// returns (nil: the broker's own).
func setupVia(t *testing.T, opts rmqtest.Options, grace time.Duration, via func(*rmqtest.Server) []string) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	db := testenv.MySQL(t)
	if err := schema.Migrate(ctx, db.DB, table); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	opts.Logf = func(string, ...any) {}
	if opts.TransactionTimeout == 0 {
		opts.TransactionTimeout = time.Nanosecond // every unresolved half is due at TriggerCheck
	}
	broker, err := rmqtest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	ns := []string{broker.NameServerAddr()}
	if via != nil {
		ns = via(broker)
	}
	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		producer.WithInstanceName(fmt.Sprintf("txcheck-%d-%d", os.Getpid(), instanceSeq.Add(1))),
		producer.WithGroupName("outbox-tx-writer"),
		producer.WithRetry(0),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tp, err := txmsg.New(txmsg.Config{Writer: w, Sender: p, NameServers: ns,
		CheckGroup: checkGroup, Secret: checkSecret, Grace: grace, EndTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Close() })
	return &world{t: t, ctx: ctx, db: db, rdb: rdb, prefix: prefix, broker: broker, tp: tp, sender: p, reg: prometheus.NewRegistry(), endGrace: -1, discardSettle: -1, nameServers: ns}
}

// startResponder starts a check responder and waits until the broker has it registered.
func (w *world) startResponder() {
	w.t.Helper()
	r, err := txcheck.New(txcheck.Config{
		NameServers: []string{w.broker.NameServerAddr()}, Groups: []string{checkGroup}, TLS: w.tls,
		DB: w.db.DB, Tables: []string{table}, HeartbeatInterval: 200 * time.Millisecond,
		ClientID: fmt.Sprintf("responder-%d", instanceSeq.Add(1)), Registerer: w.reg,
		EndGrace: w.endGrace, Workers: w.workers, QueueSize: w.queueSize, Secrets: []string{checkSecret},
		Fence: w.fence, DiscardSettle: w.discardSettle,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	if w.hold != nil {
		txcheck.HoldAnswers(r, w.hold)
	}
	if err := r.Start(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(r.Stop)
	w.resp = r
	testenv.Eventually(w.t, 5*time.Second, "the responder registered with the broker", func() bool {
		return len(w.broker.Producers(checkGroup)) == 1
	})
}

// startRelay runs a relay of the table until the test ends.
func (w *world) startRelay() {
	w.t.Helper()
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: w.nameServers, SendTimeout: 2 * time.Second})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { pub.Close() })
	r, err := relay.New(w.db.DB, w.rdb, pub, relay.Config{
		PollInterval: 50 * time.Millisecond,
		Backoff:      backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
		LockKey:      w.prefix + "lock", LockTTL: 3 * time.Second,
	})
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	w.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("relay Run: %v", err)
		}
	})
}

// prepare begins a transaction, inserts a business row stand-in and prepares a message.
func (w *world) prepare(body string) (*sql.Tx, *txmsg.Half) {
	w.t.Helper()
	tx, err := w.db.BeginTx(w.ctx, nil)
	if err != nil {
		w.t.Fatal(err)
	}
	h, err := w.tp.Prepare(w.ctx, tx, &outbox.Message{Topic: topic, Body: []byte(body), Keys: []string{"order-" + body}})
	if err != nil {
		w.t.Fatal(err)
	}
	if h.Relayed() {
		w.t.Fatal("the half was not sent")
	}
	return tx, h
}

func (w *world) commit(tx *sql.Tx) {
	w.t.Helper()
	if err := tx.Commit(); err != nil {
		w.t.Fatal(err)
	}
}

// delivered returns the messages of the topic carrying msgID.
func (w *world) delivered(msgID string) int {
	n := 0
	for _, m := range w.broker.Messages(topic) {
		if m.Properties[outbox.MsgIDProperty] == msgID {
			n++
		}
	}
	return n
}

func (w *world) status(msgID string) int {
	w.t.Helper()
	var st int
	if err := w.db.QueryRowContext(w.ctx, "SELECT status FROM "+table+" WHERE msg_id = ?", msgID).Scan(&st); err != nil {
		w.t.Fatal(err)
	}
	return st
}

func (w *world) half(msgID string) rmqtest.HalfState {
	w.t.Helper()
	h, ok := w.broker.Half(msgID)
	if !ok {
		w.t.Fatalf("no half for %s", msgID)
	}
	return h
}

// answers returns how many checks were answered with answer for reason.
func (w *world) answers(answer, reason string) int {
	w.t.Helper()
	return w.counter("outbox_relay_transaction_checks_total", map[string]string{"answer": answer, "reason": reason})
}

// handled returns the checks answered or dropped, whatever the answer or reason.
func (w *world) handled() int {
	w.t.Helper()
	return w.counter("outbox_relay_transaction_checks_total", nil) + w.counter("outbox_relay_transaction_checks_dropped_total", nil)
}

// counter sums the series of the counter name whose labels include want.
func (w *world) counter(name string, want map[string]string) int {
	w.t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		w.t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			ok := true
			for k, v := range want {
				ok = ok && l[k] == v
			}
			if ok {
				n += int(m.GetCounter().GetValue())
			}
		}
	}
	return n
}

// waitDeliveredOnce waits for the row to be sent and asserts one copy reached the topic.
func (w *world) waitDeliveredOnce(msgID string) {
	w.t.Helper()
	testenv.Eventually(w.t, 10*time.Second, "the row marked sent", func() bool { return w.status(msgID) == int(outbox.StatusSent) })
	if n := w.delivered(msgID); n != 1 {
		w.t.Fatalf("%s reached the topic %d times, want once", msgID, n)
	}
}

// The happy path: committed, END acknowledged, row marked sent by the writer, the
// message in the topic once, while a relay runs beside it (and must not send it again).
func TestCommitVisibleAtOnceAndMarkedSent(t *testing.T) {
	w := setup(t, rmqtest.Options{}, 0)
	w.startRelay()
	tx, h := w.prepare("happy")
	if w.delivered(h.MsgID()) != 0 {
		t.Fatal("the half is visible before the commit")
	}
	w.commit(tx)
	if err := w.tp.Finish(w.ctx, w.db.DB, h, nil); err != nil {
		t.Fatal(err)
	}
	if st := w.status(h.MsgID()); st != int(outbox.StatusSent) {
		t.Fatalf("row status %d after Finish, want 2", st)
	}
	if n := w.delivered(h.MsgID()); n != 1 {
		t.Fatalf("delivered %d times right after Finish, want 1", n)
	}
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Committed || hs.Commits != 1 {
		t.Fatalf("half %+v, want committed once", hs)
	}
}

// §6.8 "writer dies after commit, before END": the check finds the row pending, answers
// ROLLBACK and pulls the row forward, and the relay delivers it: exactly once, long before
// the writer's grace period would have let the relay take it.
func TestWriterKilledAfterCommitBeforeEnd(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startRelay()
	w.startResponder()
	h := w.writerDiesBeforeEnd("killed")
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.RolledBack || hs.Commits != 0 {
		t.Fatalf("half %+v, want rolled back and never committed", hs)
	}
}

// §6.8 "writer dies after the half, before commit": the transaction rolls back; the check
// finds no row and no lock, answers ROLLBACK; nothing is ever delivered.
func TestRolledBackTransactionDeliversNothing(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startRelay()
	w.startResponder()
	tx, h := w.prepare("rolled-back")
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the half rolled back", func() bool { return w.half(h.MsgID()).Resolution == rmqtest.RolledBack })
	// A second transaction, committed after, is delivered; the rolled-back one still is not.
	tx2, h2 := w.prepare("after")
	w.commit(tx2)
	if err := w.tp.Finish(w.ctx, w.db.DB, h2, nil); err != nil {
		t.Fatal(err)
	}
	if w.delivered(h.MsgID()) != 0 || w.delivered(h2.MsgID()) != 1 || w.broker.Count(topic) != 1 {
		t.Fatalf("topic holds %d messages (%d of the rolled-back one), want only the committed one", w.broker.Count(topic), w.delivered(h.MsgID()))
	}
	if w.answers("rollback", txcheck.ReasonRolledBack) != 1 {
		t.Fatal("the check was not answered rollback/no_row")
	}
}

// §6.8 "long writer transaction": while the writer's transaction is open, checks are
// answered UNKNOWN (the row's lock is held) and the half stays; once the writer commits
// and dies, the next check answers ROLLBACK and the relay delivers the row once.
func TestOpenTransactionAcrossChecks(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startRelay()
	w.startResponder()
	tx, h := w.prepare("slow")
	for i := 1; i <= 2; i++ {
		w.broker.TriggerCheck()
		testenv.Eventually(t, 5*time.Second, "an UNKNOWN answer", func() bool { return w.answers("unknown", txcheck.ReasonOpen) == i })
	}
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Pending || hs.Checks != 2 {
		t.Fatalf("half %+v after two checks of an open transaction, want pending", hs)
	}
	if w.delivered(h.MsgID()) != 0 {
		t.Fatal("delivered while the transaction was open")
	}
	w.commit(tx) // the writer dies before Finish
	w.broker.TriggerCheck()
	w.waitDeliveredOnce(h.MsgID())
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.RolledBack || hs.Commits != 0 {
		t.Fatalf("half %+v, want rolled back", hs)
	}
}

// §6.8 "END lost": Finish reports the uncertainty and leaves the row; the check rolls the
// half back and the relay delivers the row, once.
func TestEndLostDeliveredOnce(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startRelay()
	w.startResponder()
	tx, h := w.prepare("lost-end")
	w.commit(tx)
	w.broker.SetTxFaults(rmqtest.TxFaults{DropEndTransaction: 1})
	err := w.tp.Finish(w.ctx, w.db.DB, h, nil)
	if !errors.Is(err, txmsg.ErrLeftToRelay) {
		t.Fatalf("Finish with the END lost = %v, want ErrLeftToRelay", err)
	}
	w.broker.SetTxFaults(rmqtest.TxFaults{})
	if st := w.status(h.MsgID()); st != int(outbox.StatusPending) {
		t.Fatalf("row status %d after a lost END, want 0 (not marked sent)", st)
	}
	w.broker.TriggerCheck()
	w.waitDeliveredOnce(h.MsgID())
}

// §6.8 "relay down during checks": every check is lost (no responder registered) and the
// half is discarded after TransactionCheckMax; when the relay is back it delivers the row
// after the grace period, once.
func TestRelayDownDuringChecks(t *testing.T) {
	w := setup(t, rmqtest.Options{TransactionCheckMax: 3}, 2*time.Second)
	tx, h := w.prepare("relay-down")
	w.commit(tx) // the writer dies; no relay, no responder
	for i := 0; i < 4; i++ {
		w.broker.TriggerCheck()
	}
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Discarded || w.broker.ChecksSent() != 0 {
		t.Fatalf("half %+v with %d checks sent, want discarded without a check reaching anyone", hs, w.broker.ChecksSent())
	}
	w.startResponder()
	w.startRelay()
	w.waitDeliveredOnce(h.MsgID())
}

// §6.8 "broker restart": the op record of a committed half is lost in the restart, so the
// half is checked again; the row is sent (status 2), so the answer is ROLLBACK and no
// second copy is stored. The responder registers again with the restarted broker by itself.
func TestBrokerRestartRecheckNoDuplicate(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startResponder()
	tx, h := w.prepare("restart")
	w.commit(tx)
	if err := w.tp.Finish(w.ctx, w.db.DB, h, nil); err != nil {
		t.Fatal(err)
	}
	w.broker.SetTxFaults(rmqtest.TxFaults{LoseOpsOnStop: true})
	w.broker.StopBroker()
	if err := w.broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	if hs := w.half(h.MsgID()); hs.Resolution != rmqtest.Pending {
		t.Fatalf("half %+v after the restart, want pending (op record lost)", hs)
	}
	testenv.Eventually(t, 5*time.Second, "the responder registered again", func() bool { return len(w.broker.Producers(checkGroup)) == 1 })
	w.broker.TriggerCheck()
	testenv.Eventually(t, 5*time.Second, "the re-check answered", func() bool { return w.half(h.MsgID()).Resolution != rmqtest.Pending })
	if hs := w.half(h.MsgID()); hs.Commits != 1 || w.delivered(h.MsgID()) != 1 {
		t.Fatalf("half %+v, %d copies delivered; want one commit, one copy", hs, w.delivered(h.MsgID()))
	}
	if w.answers("rollback", txcheck.ReasonSent) != 1 {
		t.Fatal("the re-check was not answered rollback/already_sent")
	}
}

// The responder registers its groups with every master the name servers know, and
// re-registers with one that restarted, so a check from any broker holding a half reaches it.
func TestResponderRegistersWithEveryMaster(t *testing.T) {
	c, err := rmqtest.StartCluster(rmqtest.ClusterOptions{Brokers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	db, err := sql.Open("mysql", "nobody@tcp(127.0.0.1:1)/none") // never queried: no check is sent
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := txcheck.New(txcheck.Config{NameServers: c.NameServerAddrs(), Groups: []string{"g1", "g2"}, DB: db,
		Tables: []string{table}, HeartbeatInterval: 200 * time.Millisecond, ClientID: "every-master", Secrets: []string{checkSecret}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	registered := func() bool {
		for i := 0; i < c.Brokers(); i++ {
			for _, g := range []string{"g1", "g2"} {
				if len(c.Broker(i).Producers(g)) != 1 {
					return false
				}
			}
		}
		return true
	}
	testenv.Eventually(t, 5*time.Second, "both groups registered on the three masters", registered)
	c.Broker(1).StopBroker()
	if err := c.Broker(1).StartBroker(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "registered again with the restarted master", registered)
	r.Stop()
	testenv.Eventually(t, 5*time.Second, "registrations gone after Stop", func() bool { return len(c.Broker(0).Producers("g1")) == 0 })
}
