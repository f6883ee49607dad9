// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/tcpproxy"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

func init() { rlog.SetLogLevel("error") }

// bundle is what a relay test needs: a migrated table, Redis, a broker and a writer.
type bundle struct {
	db     *testenv.DB
	rdb    *redis.Client
	prefix string
	broker *rmqtest.Server
	pub    *rocketmq.Publisher
	writer *outbox.Writer
}

func setup(t testing.TB) *bundle {
	t.Helper()
	return setupWith(t, rmqtest.Options{})
}

// setupWith is setup with a broker started with opts; with opts.Credentials, the publisher
// signs its requests with one of them.
func setupWith(t testing.TB, opts rmqtest.Options) *bundle {
	t.Helper()
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	opts.Logf = func(string, ...any) {}
	broker, err := rmqtest.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	cfg := rocketmq.Config{
		NameServers: []string{broker.NameServerAddr()},
		SendTimeout: 2 * time.Second,
	}
	for ak, sk := range opts.Credentials { // a broker checking signatures: the publisher signs
		cfg.AccessKey, cfg.SecretKey = ak, sk
	}
	pub, err := rocketmq.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(rdb)})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{db: db, rdb: rdb, prefix: prefix, broker: broker, pub: pub, writer: w}
}

// config returns a relay config for tests: fast polls and retries, a lock of the test's own.
func (b *bundle) config() relay.Config {
	return relay.Config{
		PollInterval: 50 * time.Millisecond,
		Backoff:      backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second},
		LockKey:      b.prefix + "lock",
		LockTTL:      3 * time.Second,
	}
}

func (b *bundle) newRelay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	r, err := relay.New(b.db.DB, b.rdb, b.pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// run starts r.Run and stops it at cleanup, failing the test if Run errs.
func run(t testing.TB, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func (b *bundle) insert(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	if err := b.writer.InsertNoTx(context.Background(), b.db.DB, msgs); err != nil {
		t.Fatal(err)
	}
}

func countWhere(t testing.TB, db *sql.DB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func statusCounts(t testing.TB, db *sql.DB) string {
	rows, err := db.Query("SELECT status, COUNT(*) FROM local_message GROUP BY status ORDER BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	s := ""
	for rows.Next() {
		var st, n int
		rows.Scan(&st, &n)
		s += fmt.Sprintf("%s=%d ", outbox.Status(st), n)
	}
	return s
}

var _ = log.New(io.Discard, "", 0)

// eventually is testenv.Eventually.
var eventually = testenv.Eventually

// redisThroughProxy returns a client of the bundle's Redis, with its key prefix, that goes
// through a loopback proxy the test can freeze (Redis unreachable), with read and write
// timeouts of timeout.
func (b *bundle) redisThroughProxy(t testing.TB, timeout time.Duration) (*tcpproxy.Proxy, *redis.Client) {
	t.Helper()
	proxy, err := tcpproxy.Start(testenv.RedisAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	opts := *b.rdb.Options()
	opts.Addr = proxy.Addr()
	opts.ReadTimeout, opts.WriteTimeout = timeout, timeout
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { rdb.Close() })
	return proxy, rdb
}
