// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/internal/idemtest"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
)

// BenchmarkMiddleware measures the callback the push consumer calls, one message per call,
// around the same effect as package idempotency's benchmarks (a stock decrement): the bare
// effect, the SQL-guarded middleware and the guard called directly, in the same run, so
// that the middleware's own cost (key, identity, logging, recovery) reads as the difference
// between the last two.
func BenchmarkMiddleware(b *testing.B) {
	db := idemtest.BenchStock(b)
	g, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.CreateTable(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	mw, err := rocketmqmw.NewTx(g, db, rocketmqmw.Config{}, func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
		return idemtest.ReduceStock(ctx, tx, msg.QueueOffset)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer mw.Close()
	var seq atomic.Int64
	b.Run("baseline", func(b *testing.B) { // the effect alone, autocommit
		idemtest.RunBoth(b, &seq, func(ctx context.Context, n int64) error { return idemtest.ReduceStock(ctx, db, n) })
	})
	b.Run("guard", func(b *testing.B) { // SQLGuard.Do with a key made by hand
		idemtest.RunBoth(b, &seq, func(ctx context.Context, n int64) error {
			// A cancellable context, as the middleware gives (the driver then watches it).
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			_, err := g.Do(ctx, db, fmt.Sprintf("orders:created:SN%d", n), func(ctx context.Context, tx *sql.Tx) error {
				return idemtest.ReduceStock(ctx, tx, n)
			})
			return err
		})
	})
	b.Run("middleware", func(b *testing.B) { // mw.Consume: key, identity, guard, effect
		idemtest.RunBoth(b, &seq, func(ctx context.Context, n int64) error {
			msg := &primitive.MessageExt{MsgId: fmt.Sprint(n), QueueOffset: n}
			msg.Topic = "orders"
			msg.WithTag("created")
			msg.WithKeys([]string{fmt.Sprintf("SN%d", n)})
			res, err := mw.Consume(ctx, msg)
			if res != consumer.ConsumeSuccess {
				return fmt.Errorf("%v: %w", res, err)
			}
			return nil
		})
	})
}
