// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestEveryOrderAppliedExactlyOnceThroughLostAcksAndRelayRestart runs the whole chain: orders
// committed with their messages, the relay process (killed with -9 half way and restarted),
// a broker losing 2% of acks, and two consumer groups, one guarded by SQL and one by Redis,
// each applying its effect to a business table. Every order is applied exactly once by each.
func TestEveryOrderAppliedExactlyOnceThroughLostAcksAndRelayRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, ddl := range []string{
		"CREATE TABLE applied_sql (order_sn varchar(32) PRIMARY KEY, n int NOT NULL)",
		"CREATE TABLE applied_redis (order_sn varchar(32) PRIMARY KEY, n int NOT NULL)",
	} {
		if _, err := e.db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
	}
	e.broker.SetTopicFaults("orders", rmqtest.Faults{DropAfterStore: 0.02})

	const orders = 1000
	// The SQL-guarded consumer: dedupe row and effect in one transaction.
	sqlGuard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock-sql"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlGuard.CreateTable(ctx, e.db); err != nil {
		t.Fatal(err)
	}
	sqlConsume, err := rocketmqmw.NewTx(sqlGuard, e.db, rocketmqmw.Config{},
		func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO applied_sql VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", msg.GetKeys())
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	// The Redis-guarded consumer: an effect outside any transaction.
	rdb, prefix := testenv.Redis(t)
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix + "idem:"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.NewGuard(store, idempotency.Config{Group: "stock-redis"})
	if err != nil {
		t.Fatal(err)
	}
	redisConsume, err := rocketmqmw.New(guard, rocketmqmw.Config{},
		func(ctx context.Context, msg *primitive.MessageExt) error {
			_, err := e.db.ExecContext(ctx, "INSERT INTO applied_redis VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", msg.GetKeys())
			return err
		})
	if err != nil {
		t.Fatal(err)
	}
	var handledSQL, handledRedis atomic.Int64
	t.Cleanup(sqlConsume.Close)
	t.Cleanup(redisConsume.Close)
	startConsumer(t, e, "stock-sql", sqlConsume.Consume, &handledSQL)
	startConsumer(t, e, "stock-redis", redisConsume.Consume, &handledRedis)

	// Orders and their messages, one transaction each.
	for i := 0; i < orders; i++ {
		tx, err := e.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		sn := fmt.Sprintf("SN%05d", i)
		if err := e.writer.Insert(ctx, tx, &outbox.Message{Topic: "orders", Keys: []string{sn}, Body: []byte(`{"orderSn":"` + sn + `"}`)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	relayEnv := []string{"OUTBOX_RELAY_BATCH_SEND=false", "OUTBOX_RELAY_BATCH_SIZE=100", "OUTBOX_BACKOFF_BASE=100ms"}
	first := e.startRelay(t, relayEnv...)
	eventually(t, 60*time.Second, "a third of the orders sent", func() bool { return e.count(t, "status = 2") >= orders/3 })
	first.Kill9(t)
	e.startRelay(t, relayEnv...)
	eventually(t, 240*time.Second, "every order sent", func() bool { return e.count(t, "status = 2") == orders })

	stored := e.broker.Count("orders")
	if stored <= orders {
		t.Fatalf("the broker stored %d messages for %d orders: no duplicate was produced, the test proves nothing", stored, orders)
	}
	// Each group has handled at least as many deliveries as the broker stored.
	eventually(t, 180*time.Second, "both consumers to handle every stored message", func() bool {
		return handledSQL.Load() >= int64(stored) && handledRedis.Load() >= int64(stored)
	})
	for _, table := range []string{"applied_sql", "applied_redis"} {
		var rows, total, over int
		if err := e.db.QueryRow("SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(SUM(n > 1), 0) FROM "+table).Scan(&rows, &total, &over); err != nil {
			t.Fatal(err)
		}
		if rows != orders || total != orders || over != 0 {
			t.Errorf("%s: %d orders applied, %d applications, %d applied more than once; want %d, %d, 0",
				table, rows, total, over, orders, orders)
		}
	}
	t.Logf("stored %d messages for %d orders (%d duplicates); deliveries handled: sql %d, redis %d",
		stored, orders, stored-orders, handledSQL.Load(), handledRedis.Load())
}

func startConsumer(t *testing.T, e *env, group string, consume func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error), handled *atomic.Int64) {
	t.Helper()
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName(group),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{e.broker.NameServerAddr()})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance(group+"-"+testenv.RandomSuffix(6)),
	)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Subscribe("orders", consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		res, err := consume(ctx, msgs...)
		if res == consumer.ConsumeSuccess {
			handled.Add(int64(len(msgs)))
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
}
