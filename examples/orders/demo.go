// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
	"github.com/outbox-relay/outbox-relay/relay"
	relayrmq "github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

var skus = []string{"SKU-BLUE", "SKU-RED", "SKU-GREEN"}

const initialStock = 1_000_000

// counters are what the demo reports.
type counters struct {
	committed, rolledBack atomic.Int64
	committedQty          atomic.Int64
	received              atomic.Int64 // deliveries handed to the consumer, duplicates included
	halfCommitted         atomic.Int64 // -half-messages: committed by the writer's END_TRANSACTION
	leftToRelay           atomic.Int64 // -half-messages: committed orders the relay delivered
}

// checkGroup is the demo's transactional check group (-half-messages).
const checkGroup = "orders-demo-tx"

// checkSecret signs the demo's halves; the relay is given the same one. A real service keeps
// its secret out of its code (docs/security.md).
const checkSecret = "orders-demo-half-secret"

// halfWriter returns the half-message writer of -half-messages, or nil without the flag.
func halfWriter(o options, w *outbox.Writer, nameservers []string) (*txmsg.Producer, func(), error) {
	if !o.halfMsgs {
		return nil, func() {}, nil
	}
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(nameservers)),
		producer.WithGroupName("orders-demo-writer"), producer.WithRetry(0),
		producer.WithInstanceName("orders-demo-writer")) // its own connections: a lost ack drops them
	if err != nil {
		return nil, nil, err
	}
	if err := p.Start(); err != nil {
		return nil, nil, err
	}
	tp, err := txmsg.New(txmsg.Config{Writer: w, Sender: p, NameServers: nameservers, CheckGroup: checkGroup,
		Secret: checkSecret, SendTimeout: 500 * time.Millisecond})
	if err != nil {
		_ = p.Shutdown()
		return nil, nil, err
	}
	return tp, func() { _ = tp.Close(); _ = p.Shutdown() }, nil
}

// run is the demo: a database, Redis and a broker, the relay, the idempotent consumer, then
// the order service writing orders until each committed one is applied once. It reports
// whether every check held.
func run(ctx context.Context, o options, out io.Writer) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	db, dsn, err := setupDatabase(ctx, o)
	if err != nil {
		return false, err
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: o.redisAddr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return false, fmt.Errorf("Redis at %s: %w (run `make services`)", o.redisAddr, err)
	}
	nameservers, broker, err := chooseBroker(o, out)
	if err != nil {
		return false, err
	}
	if broker != nil {
		defer broker.Close()
	}

	var c counters
	stopRelay, relayExited, err := startRelay(ctx, o, dsn, db, rdb, nameservers, out)
	if err != nil {
		return false, err
	}
	rel := &runningRelay{stop: stopRelay, exited: relayExited}
	defer rel.Stop()
	stopConsumer, err := startConsumer(db, nameservers, &c)
	if err != nil {
		return false, err
	}
	defer stopConsumer()

	writer, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(rdb)})
	if err != nil {
		return false, err
	}
	tp, stopWriter, err := halfWriter(o, writer, nameservers)
	if err != nil {
		return false, err
	}
	defer stopWriter()
	if tp != nil {
		fmt.Fprintf(out, "writer: half messages (check group %s)\n", checkGroup)
	}
	orders := &orderRun{o: o, db: db, writer: writer, tp: tp, c: &c, rolledBack: &sync.Map{}, broker: broker, out: out}
	return orders.until(ctx, rel)
}

// chooseBroker returns the name servers of -nameservers, or starts the in-process test broker
// (returned, to be closed) losing -lost-acks of its acknowledgements.
func chooseBroker(o options, out io.Writer) ([]string, *rmqtest.Server, error) {
	if o.nameservers != "" {
		fmt.Fprintf(out, "broker: RocketMQ name servers %s\n", o.nameservers)
		return strings.Split(o.nameservers, ","), nil, nil
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {},
		TransactionTimeout: time.Second, TransactionCheckInterval: time.Second})
	if err != nil {
		return nil, nil, err
	}
	broker.SetFaults(rmqtest.Faults{DropAfterStore: o.lostAcks})
	fmt.Fprintf(out, "broker: in-process test broker at %s, losing %.0f%% of acks on purpose\n", broker.NameServerAddr(), o.lostAcks*100)
	return []string{broker.NameServerAddr()}, broker, nil
}

// runningRelay is the relay the demo started; Stop stops it once, unless it exited by itself.
type runningRelay struct {
	stop    func() error
	exited  <-chan error
	stopped bool
}

// Stop stops the relay, the first time only.
func (r *runningRelay) Stop() error {
	if r.stopped {
		return nil
	}
	r.stopped = true
	return r.stop()
}

// orderRun is the order service's part of the demo: it places the orders and watches them
// delivered and applied.
type orderRun struct {
	o          options
	db         *sql.DB
	writer     *outbox.Writer
	tp         *txmsg.Producer
	c          *counters
	rolledBack *sync.Map
	broker     *rmqtest.Server
	out        io.Writer
}

// until places the orders and prints the progress every second, until every committed order
// is delivered and applied (then it stops the relay and reports), the relay exits by itself,
// or ctx ends.
func (r *orderRun) until(ctx context.Context, rel *runningRelay) (bool, error) {
	start := time.Now()
	writeDone := make(chan error, 1)
	go func() { writeDone <- placeOrders(ctx, r.db, r.writer, r.tp, r.o, r.c, r.rolledBack) }()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	writing := true
	for {
		select {
		case err := <-writeDone:
			if err != nil {
				return false, err
			}
			writing = false
		case err := <-rel.exited:
			rel.stopped = true
			return false, fmt.Errorf("the relay exited on its own (%v): %s", err, relayExitHint)
		case <-ctx.Done():
			fmt.Fprintln(r.out, "demo: stopped before every order was applied")
			return report(context.Background(), r.db, r.c, r.broker, r.rolledBack, r.out, time.Since(start))
		case <-ticker.C:
			done, err := r.printProgress(ctx, start, writing)
			if err != nil {
				return false, err
			}
			if done {
				if err := rel.Stop(); err != nil {
					return false, err
				}
				return report(ctx, r.db, r.c, r.broker, r.rolledBack, r.out, time.Since(start))
			}
		}
	}
}

// printProgress prints the counts so far and reports whether every committed order is
// delivered and applied, the writing over.
func (r *orderRun) printProgress(ctx context.Context, start time.Time, writing bool) (bool, error) {
	p, err := progress(ctx, r.db)
	if err != nil {
		return false, err
	}
	c := r.c
	fmt.Fprintf(r.out, "[%4.1fs] written %d, rolled back %d, delivered %d, consumed %d (deliveries received %d)\n",
		time.Since(start).Seconds(), c.committed.Load(), c.rolledBack.Load(), p.delivered, p.applied, c.received.Load())
	return !writing && p.applied >= c.committed.Load() && p.delivered >= c.committed.Load(), nil
}

func setupDatabase(ctx context.Context, o options) (*sql.DB, string, error) {
	cfg, err := mysql.ParseDSN(o.mysqlServer)
	if err != nil {
		return nil, "", fmt.Errorf("-mysql: %w", err)
	}
	if err := schema.ValidateIdent(o.database); err != nil {
		return nil, "", fmt.Errorf("-database: %w", err)
	}
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, "", err
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		return nil, "", fmt.Errorf("MySQL at %s: %w (run `make services`)", cfg.Addr, err)
	}
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + o.database, "CREATE DATABASE " + o.database + " CHARACTER SET utf8mb4"} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			return nil, "", fmt.Errorf("prepare database %s: %w", o.database, err)
		}
	}
	cfg.DBName = o.database
	cfg.InterpolateParams = true
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, "", err
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	stmts := []string{
		`CREATE TABLE orders (order_sn varchar(40) PRIMARY KEY, sku varchar(20) NOT NULL, qty int NOT NULL,
			stock_reduced int NOT NULL DEFAULT 0, created_at datetime NOT NULL DEFAULT CURRENT_TIMESTAMP)`,
		`CREATE TABLE stock (sku varchar(20) PRIMARY KEY, qty int NOT NULL)`,
	}
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return nil, "", err
		}
	}
	for _, sku := range skus {
		if _, err := db.ExecContext(ctx, "INSERT INTO stock VALUES (?, ?)", sku, initialStock); err != nil {
			return nil, "", err
		}
	}
	if err := schema.Migrate(ctx, db, "local_message"); err != nil {
		return nil, "", err
	}
	return db, dsn, nil
}

// placeOrders is the order service: each order and its message in one transaction.
func placeOrders(ctx context.Context, db *sql.DB, w *outbox.Writer, tp *txmsg.Producer, o options, c *counters, rolledBack *sync.Map) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, o.writers)
	for i := 0; i < o.writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				n := next.Add(1)
				if n > int64(o.orders) {
					return
				}
				if err := placeOrder(ctx, db, w, tp, n, o.rollbackPct, c, rolledBack); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

type orderEvent struct {
	OrderSn string `json:"orderSn"`
	Sku     string `json:"sku"`
	Qty     int    `json:"qty"`
}

func placeOrder(ctx context.Context, db *sql.DB, w *outbox.Writer, tp *txmsg.Producer, n int64, rollbackPct int, c *counters, rolledBack *sync.Map) error {
	ev := orderEvent{OrderSn: fmt.Sprintf("SN%08d", n), Sku: skus[n%int64(len(skus))], Qty: 1 + int(n%3)}
	body, _ := json.Marshal(ev)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (order_sn, sku, qty) VALUES (?, ?, ?)", ev.OrderSn, ev.Sku, ev.Qty); err != nil {
		return fmt.Errorf("insert order: %w", err)
	}
	msg := &outbox.Message{
		Topic: "orders", Tag: "created", Keys: []string{ev.OrderSn}, Body: body,
		Properties: map[string]string{"source": "orders-demo"},
	}
	if tp != nil {
		return placeHalf(ctx, db, tx, tp, msg, ev, rollbackPct, c, rolledBack)
	}
	if err := w.Insert(ctx, tx, msg); err != nil {
		return err
	}
	if rand.IntN(100) < rollbackPct {
		// Payment declined, say: the order and its message disappear together.
		rolledBack.Store(ev.OrderSn, true)
		c.rolledBack.Add(1)
		return tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	c.committed.Add(1)
	c.committedQty.Add(int64(ev.Qty))
	_ = w.NudgeFor(ctx, msg) // a hint: on error the relay finds the row at its next poll
	return nil
}

var errDeclined = errors.New("payment declined")

// placeHalf is placeOrder's end on the half-message path: the row and the half before the
// commit, END_TRANSACTION after it.
func placeHalf(ctx context.Context, db *sql.DB, tx *sql.Tx, tp *txmsg.Producer, msg *outbox.Message, ev orderEvent, rollbackPct int, c *counters, rolledBack *sync.Map) error {
	h, err := tp.Prepare(ctx, tx, msg)
	if err != nil {
		return err
	}
	if rand.IntN(100) < rollbackPct {
		rolledBack.Store(ev.OrderSn, true)
		c.rolledBack.Add(1)
		if err := tx.Rollback(); err != nil {
			return err
		}
		return tp.Finish(ctx, db, h, errDeclined)
	}
	cerr := tx.Commit()
	if err := tp.Finish(ctx, db, h, cerr); errors.Is(err, txmsg.ErrLeftToRelay) || (err == nil && h.Relayed()) {
		c.leftToRelay.Add(1)
	} else if err != nil {
		return err
	} else if cerr == nil {
		c.halfCommitted.Add(1)
	}
	if cerr != nil {
		return cerr
	}
	c.committed.Add(1)
	c.committedQty.Add(int64(ev.Qty))
	return nil
}

// startConsumer runs the stock consumer: it reduces stock once per order, guarded by a
// dedupe row in the same transaction.
func startConsumer(db *sql.DB, nameservers []string, c *counters) (stop func(), err error) {
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock-consumer"})
	if err != nil {
		return nil, err
	}
	if err := guard.CreateTable(context.Background(), db); err != nil {
		return nil, err
	}
	mw, err := rocketmqmw.NewTx(guard, db, rocketmqmw.Config{
		// The order number from the body; the default identity adds topic and tag, so a
		// later "paid" event of the same order would be applied too.
		Key: rocketmqmw.KeyFromJSONField("orderSn"),
	}, func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
		var ev orderEvent
		if err := json.Unmarshal(msg.Body, &ev); err != nil {
			return fmt.Errorf("decode order event: %w", err)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - ? WHERE sku = ?", ev.Qty, ev.Sku); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, "UPDATE orders SET stock_reduced = stock_reduced + 1 WHERE order_sn = ?", ev.OrderSn)
		return err
	})
	if err != nil {
		return nil, err
	}
	counting := func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		c.received.Add(int64(len(msgs)))
		return mw.Consume(ctx, msgs...)
	}
	pc, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName("stock-consumer"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver(nameservers)),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return nil, err
	}
	if err := pc.Subscribe("orders", consumer.MessageSelector{Type: consumer.TAG, Expression: "created"}, counting); err != nil {
		return nil, err
	}
	if err := pc.Start(); err != nil {
		return nil, err
	}
	return func() { mw.Close(); _ = pc.Shutdown() }, nil
}

// relayExitHint tells where to look when the sidecar relay stops by itself.
var relayExitHint = "see " + filepath.Join(os.TempDir(), "outbox-demo-relay.log")

// startRelay runs the relay as a sidecar process (-relay-bin) or in-process. exited reports
// a sidecar that stopped by itself (a bad configuration, a crash), so the demo fails at once
// instead of waiting for deliveries that cannot come.
func startRelay(ctx context.Context, o options, dsn string, db *sql.DB, rdb *redis.Client, nameservers []string, out io.Writer) (stop func() error, exited <-chan error, err error) {
	if o.relayBin == "" {
		stop, err := startRelayInProcess(ctx, o, db, rdb, nameservers)
		if err == nil {
			fmt.Fprintln(out, "relay: in-process")
		}
		return stop, nil, err
	}
	return startSidecar(relayCommand(o, dsn, nameservers), out)
}

// startRelayInProcess runs the relay as a library, with its check-back responder when the
// writer sends half messages; stop ends both and returns Run's error.
func startRelayInProcess(ctx context.Context, o options, db *sql.DB, rdb *redis.Client, nameservers []string) (stop func() error, err error) {
	pub, err := relayrmq.NewPublisher(relayrmq.Config{NameServers: nameservers, SendTimeout: time.Second})
	if err != nil {
		return nil, err
	}
	r, err := relay.New(db, rdb, pub, relay.Config{PollInterval: 200 * time.Millisecond, LockKey: "outbox-demo:lock:local_message"})
	if err != nil {
		return nil, err
	}
	stopChecks := func() {}
	if o.halfMsgs {
		resp, err := txcheck.New(txcheck.Config{NameServers: nameservers, Groups: []string{checkGroup}, DB: db, Tables: []string{"local_message"},
			Secrets: []string{checkSecret}})
		if err != nil {
			return nil, err
		}
		if err := resp.Start(ctx); err != nil {
			return nil, err
		}
		stopChecks = resp.Stop
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	return func() error { cancel(); err := <-done; stopChecks(); pub.Close(); return err }, nil
}

// relayCommand is `outbox-relay run`, configured by environment variables alone.
func relayCommand(o options, dsn string, nameservers []string) *exec.Cmd {
	cmd := exec.Command(o.relayBin, "run")
	cmd.Env = append(os.Environ(),
		"OUTBOX_MYSQL_DSN="+dsn,
		"OUTBOX_REDIS_ADDR="+o.redisAddr,
		"OUTBOX_ROCKETMQ_NAMESERVERS="+strings.Join(nameservers, ","),
		"OUTBOX_ROCKETMQ_SEND_TIMEOUT=1s",
		"OUTBOX_RELAY_POLL_INTERVAL=200ms",
		"OUTBOX_BACKOFF_BASE=200ms",
		"OUTBOX_LOCK_KEY=outbox-demo:lock:{table}",
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_LOG_FORMAT=json",
	)
	if o.halfMsgs {
		cmd.Env = append(cmd.Env, "OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS="+checkGroup,
			"OUTBOX_ROCKETMQ_TRANSACTION_CHECK_SECRETS="+checkSecret)
	}
	return cmd
}

// startSidecar starts the relay's process with its output in a log file. exited receives its
// exit if it stops before stop is called, after the log is printed; stop sends SIGTERM and
// waits up to 30 s for a clean exit.
func startSidecar(cmd *exec.Cmd, out io.Writer) (stop func() error, exited <-chan error, err error) {
	logPath := filepath.Join(os.TempDir(), "outbox-demo-relay.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, nil, fmt.Errorf("start relay %s: %w", cmd.Args[0], err)
	}
	done, early, stopping := make(chan error, 1), make(chan error, 1), make(chan struct{})
	go func() {
		err := cmd.Wait()
		logFile.Close()
		select {
		case <-stopping:
		default:
			if log, rerr := os.ReadFile(logPath); rerr == nil {
				fmt.Fprintf(out, "relay log:\n%s\n", log)
			}
			early <- err
		}
		done <- err
	}()
	fmt.Fprintf(out, "relay: %s run (pid %d, log %s)\n", cmd.Args[0], cmd.Process.Pid, logPath)
	return func() error {
		close(stopping)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("relay exited with %v after SIGTERM (see %s)", err, logPath)
			}
			fmt.Fprintln(out, "relay: stopped cleanly on SIGTERM (exit 0)")
			return nil
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("relay did not stop within 30s of SIGTERM")
		}
	}, early, nil
}

type progressCounts struct{ delivered, applied int64 }

func progress(ctx context.Context, db *sql.DB) (progressCounts, error) {
	var p progressCounts
	err := db.QueryRowContext(ctx, "SELECT (SELECT COUNT(*) FROM local_message WHERE status = 2), (SELECT COUNT(*) FROM orders WHERE stock_reduced > 0)").
		Scan(&p.delivered, &p.applied)
	return p, err
}

// report prints the summary and checks the demo's promise: every committed order applied
// exactly once, no rolled-back order published.
func report(ctx context.Context, db *sql.DB, c *counters, broker *rmqtest.Server, rolledBack *sync.Map, out io.Writer, took time.Duration) (bool, error) {
	var once, twice, never, dead, unsent int64
	var reduced int64
	err := db.QueryRowContext(ctx, `SELECT
		(SELECT COUNT(*) FROM orders WHERE stock_reduced = 1),
		(SELECT COUNT(*) FROM orders WHERE stock_reduced > 1),
		(SELECT COUNT(*) FROM orders WHERE stock_reduced = 0),
		(SELECT COUNT(*) FROM local_message WHERE status = 3),
		(SELECT COUNT(*) FROM local_message WHERE status IN (0, 1)),
		(SELECT ? - SUM(qty) FROM stock)`, int64(initialStock*len(skus))).Scan(&once, &twice, &never, &dead, &unsent, &reduced)
	if err != nil {
		return false, err
	}
	stored, leaked := int64(-1), 0
	if broker != nil {
		msgs := broker.Messages("orders")
		stored = int64(len(msgs))
		for _, m := range msgs {
			var ev orderEvent
			if json.Unmarshal(m.Body, &ev) == nil {
				if _, ok := rolledBack.Load(ev.OrderSn); ok {
					leaked++
				}
			}
		}
	}
	committed := c.committed.Load()
	fmt.Fprintf(out, "\nsummary after %.1fs\n", took.Seconds())
	fmt.Fprintf(out, "  written (committed)      %6d orders\n", committed)
	fmt.Fprintf(out, "  rolled back              %6d orders (never published: %d leaked)\n", c.rolledBack.Load(), leaked)
	fmt.Fprintf(out, "  delivered                %6d rows sent, %d pending, %d dead\n", committed-unsent-dead, unsent, dead)
	if stored >= 0 {
		fmt.Fprintf(out, "  stored by the broker     %6d messages (%d duplicates from lost acks)\n", stored, stored-committed)
	}
	if c.halfCommitted.Load()+c.leftToRelay.Load() > 0 {
		fmt.Fprintf(out, "  half messages            %6d committed by the writer's END, %d left to the relay\n", c.halfCommitted.Load(), c.leftToRelay.Load())
	}
	fmt.Fprintf(out, "  deliveries to consumer   %6d\n", c.received.Load())
	fmt.Fprintf(out, "  consumed (applied once)  %6d orders; applied twice: %d; not applied: %d\n", once, twice, never)
	fmt.Fprintf(out, "  stock reduced by         %6d units (committed orders ordered %d)\n", reduced, c.committedQty.Load())
	ok := once == committed && twice == 0 && never == 0 && leaked == 0 && reduced == c.committedQty.Load()
	if ok {
		fmt.Fprintln(out, "OK: every committed order was applied exactly once; no rolled-back order was published.")
	} else {
		fmt.Fprintln(out, "FAILED: the outcome above breaks the exactly-once promise.")
	}
	return ok, nil
}
