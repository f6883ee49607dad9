// SPDX-License-Identifier: Apache-2.0

package replay_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	relayrmq "github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

const table = "local_message"

func init() { rlog.SetLogLevel("error") }

type bundle struct {
	db     *testenv.DB
	broker *rmqtest.Server
	pub    *relayrmq.Publisher
}

func setup(t *testing.T) *bundle {
	t.Helper()
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, table); err != nil {
		t.Fatal(err)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	pub, err := relayrmq.NewPublisher(relayrmq.Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	return &bundle{db: db, broker: broker, pub: pub}
}

// fakeClock moves only when slept on: the run's rate is measured in its time, not the wall's.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return ctx.Err()
}

// rowsDigest is a digest of every row's state (status, retry_count, sent_time, update_time):
// a replay must change none.
func rowsDigest(t *testing.T, db *sql.DB) string {
	t.Helper()
	var n int
	var d string
	err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(CRC32(CONCAT_WS(',', id, status, retry_count, sent_time, next_retry_time, update_time))), 0) FROM "+table).Scan(&n, &d)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(n, " ", d)
}

// TestReplayDryRunCountIsWhatIsSentAtTheRateLimit: 2,000 sent rows (keyed and not, two tags)
// among unsent ones: the dry run's count equals the copies the broker stored, each copy carries
// its row's identity (OUTBOX_MSG_ID, keys, tag, sharding key) and the run's OUTBOX_REPLAY
// mark, the rate on the injected clock is the limit (never above, and reached), and no row
// changed by the replay; rows sent after the dry run are left out.
func TestReplayDryRunCountIsWhatIsSentAtTheRateLimit(t *testing.T) {
	b := setup(t)
	_, err := b.db.Exec("INSERT INTO " + table + " (msg_id, topic, tag, content, status, msg_keys, sharding_key, sent_time, properties)" +
		" SELECT CONCAT('m-', seq), 'orders', IF(seq % 2 = 0, 'paid', 'created'), CONCAT('{\"n\":', seq, '}'), IF(seq % 10 = 9, 0, 2)," +
		" IF(seq % 3 = 0, '', CONCAT('SN-', seq)), IF(seq % 4 = 0, '', CONCAT('cust-', seq % 13)), 1764000000000 + seq," +
		" IF(seq % 5 = 0, '{\"tenant\":\"t1\"}', NULL) FROM seq_1_to_2222")
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	cfg := replay.Config{DB: b.db.DB, Table: table, Publisher: b.pub, Rate: 400, Burst: 32, Batch: 32, PageSize: 300, Clock: clock, RunID: "rtest1"}
	want, through, err := replay.Count(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want != 2000 {
		t.Fatalf("dry run counted %d, want the 2000 sent rows", want)
	}
	// Rows sent after the dry run are not chased: the run sends what was counted.
	if _, err := b.db.Exec("INSERT INTO " + table + " (msg_id, topic, content, status, sent_time) SELECT CONCAT('late-', seq), 'orders', '{}', 2, 1764000000000 FROM seq_1_to_50"); err != nil {
		t.Fatal(err)
	}
	cfg.Filter.ToID = through
	before := rowsDigest(t, b.db.DB)
	start := clock.Now()
	res, err := replay.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	elapsed := clock.Now().Sub(start).Seconds()
	if res.Sent != want || res.Skipped != 0 || b.broker.Count("orders") != int(want) {
		t.Fatalf("dry run %d; run sent %d, skipped %d (%v); broker stored %d", want, res.Sent, res.Skipped, res.Skips, b.broker.Count("orders"))
	}
	// The rate: at most burst + limit x time, and no slower than one request's worth below it.
	if float64(res.Sent) > 32+400*elapsed+1e-6 || float64(res.Sent) < 400*elapsed {
		t.Errorf("sent %d in %.3f s of the injected clock at a limit of 400/s with a burst of 32", res.Sent, elapsed)
	}
	seen := map[string]bool{}
	for _, m := range b.broker.Messages("orders") {
		p := m.Properties
		id := p[outbox.MsgIDProperty]
		var n int
		fmt.Sscanf(id, "m-%d", &n)
		wantKeys, wantTag, wantShard := fmt.Sprintf("SN-%d", n), "created", fmt.Sprintf("cust-%d", n%13)
		if n%3 == 0 {
			wantKeys = id
		}
		if n%2 == 0 {
			wantTag = "paid"
		}
		if n%4 == 0 {
			wantShard = ""
		}
		if seen[id] || n%10 == 9 || p["KEYS"] != wantKeys || p["TAGS"] != wantTag || p["SHARDING_KEY"] != wantShard ||
			!strings.HasPrefix(p[outbox.ReplayProperty], "rtest1 2026-11-27T12:00:00Z") || (n%5 == 0) != (p["tenant"] == "t1") {
			t.Fatalf("copy of %s: properties %v", id, p)
		}
		seen[id] = true
	}
	if after := rowsDigest(t, b.db.DB); after != before {
		t.Errorf("rows changed by the replay: %s, was %s", after, before)
	}
}

// consumerGroup is a push consumer guarded by idempotency.SQLGuard that applies each order
// to its own table (an effect, counted per order).
type consumerGroup struct {
	name              string
	handled, replayed atomic.Int64
}

func startGroup(t *testing.T, b *bundle, name string) *consumerGroup {
	t.Helper()
	return startGroupOn(t, b.db, b.broker.NameServerAddr(), name, "orders", "*")
}

// startGroupOn starts group name on the name server nameSrv, subscribed to topic's tags tagExpr.
func startGroupOn(t testing.TB, db *testenv.DB, nameSrv, name, topic, tagExpr string) *consumerGroup {
	t.Helper()
	g := &consumerGroup{name: name}
	ctx := context.Background()
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS applied_" + name + " (order_sn varchar(32) PRIMARY KEY, n int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.CreateTable(ctx, db.DB); err != nil {
		t.Fatal(err)
	}
	mw, err := rocketmqmw.NewTx(guard, db.DB, rocketmqmw.Config{}, func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO applied_"+name+" VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", msg.GetKeys())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mw.Close)
	c, err := rocketmq.NewPushConsumer(consumer.WithGroupName(name),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithInstance(name+"-"+testenv.RandomSuffix(6)))
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: tagExpr}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		res, err := mw.Consume(ctx, msgs...)
		if res == consumer.ConsumeSuccess {
			g.handled.Add(int64(len(msgs)))
			for _, m := range msgs {
				if m.GetProperty(outbox.ReplayProperty) != "" {
					g.replayed.Add(1)
				}
			}
		}
		return res, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return g
}

// applied returns the orders a group applied, the effects in all, and the orders applied more
// than once.
func (g *consumerGroup) applied(t testing.TB, db *sql.DB) (orders, effects, twice int) {
	t.Helper()
	if err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(SUM(n > 1), 0) FROM applied_"+g.name).Scan(&orders, &effects, &twice); err != nil {
		t.Fatal(err)
	}
	return
}

// TestReplayAppliedNoneAgainWithDedupeStateEachOnceWithout: the relay delivers 600 orders to
// two consumer groups guarded by SQLGuard; one then "restores its database from a backup
// taken before them" (its effects and dedupe rows gone). A replay of the sent rows makes the
// group that kept its dedupe state apply none again, and the restored one apply each once.
func TestReplayAppliedNoneAgainWithDedupeStateEachOnceWithout(t *testing.T) {
	b := setup(t)
	const orders = 600
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]outbox.Message, orders)
	for i := range msgs {
		msgs[i] = outbox.Message{Topic: "orders", Tag: "paid", Keys: []string{fmt.Sprintf("SN%05d", i)}, Body: []byte(fmt.Sprintf(`{"order":%d}`, i))}
		if i%2 == 0 {
			msgs[i].ShardingKey = fmt.Sprintf("cust-%d", i%17)
		}
	}
	if err := w.InsertNoTx(context.Background(), b.db.DB, msgs); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	r, err := relay.New(b.db.DB, rdb, b.pub, relay.Config{PollInterval: 50 * time.Millisecond, LockKey: prefix + "lock", LockTTL: 3 * time.Second,
		Backoff: backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testenv.Eventually(t, 60*time.Second, "every order sent by the relay", func() bool {
		var n int
		_ = b.db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE status = 2").Scan(&n)
		return n == orders
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	kept, restored := startGroup(t, b, "kept"), startGroup(t, b, "restored")
	testenv.Eventually(t, 60*time.Second, "both groups to apply every order", func() bool {
		return kept.handled.Load() >= orders && restored.handled.Load() >= orders
	})
	// The restore: the group's database as it was before the orders.
	for _, q := range []string{"DELETE FROM applied_restored", "DELETE FROM outbox_dedupe WHERE consumer_group = 'restored'"} {
		if _, err := b.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	cfg := replay.Config{DB: b.db.DB, Table: table, Publisher: b.pub, Rate: 5000, Filter: ops.ReplayFilter{Topic: "orders"}}
	n, through, err := replay.Count(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Filter.ToID = through
	res, err := replay.Run(context.Background(), cfg)
	if err != nil || n != orders || res.Sent != n {
		t.Fatalf("dry run %d, replay sent %d (%v), want %d", n, res.Sent, err, orders)
	}
	testenv.Eventually(t, 60*time.Second, "both groups to handle every replayed copy", func() bool {
		return kept.replayed.Load() >= orders && restored.replayed.Load() >= orders
	})
	if o, e, twice := kept.applied(t, b.db.DB); o != orders || e != orders || twice != 0 {
		t.Errorf("group with its dedupe state: %d orders applied, %d effects, %d twice; want %d, %d, 0 (none applied again)", o, e, twice, orders, orders)
	}
	if o, e, twice := restored.applied(t, b.db.DB); o != orders || e != orders || twice != 0 {
		t.Errorf("restored group: %d orders applied, %d effects, %d twice; want %d, %d, 0 (each once)", o, e, twice, orders, orders)
	}
}
