// SPDX-License-Identifier: Apache-2.0

package idempotency_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/internal/idemtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// The benchmarks measure the per-message cost of each guard around the same business
// effect, a stock decrement (UPDATE of one of 1,000 rows), next to that effect alone, so
// that the overhead reads as a ratio of the baseline in the same run. Every message has a
// new key: the price of a first delivery, the common case. "serial" is one consumer
// goroutine; "parallel8" runs 8 (the push consumer runs 20 by default).

var (
	setupBenchStock = idemtest.BenchStock
	reduceStock     = idemtest.ReduceStock
	runBoth         = idemtest.RunBoth
)

func BenchmarkRedisGuard(b *testing.B) {
	db := setupBenchStock(b)
	rdb, prefix := testenv.Redis(b)
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	g, err := idempotency.NewGuard(store, idempotency.Config{Group: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.Run("baseline", func(b *testing.B) {
		runBoth(b, &seq, func(ctx context.Context, n int64) error { return reduceStock(ctx, db, n) })
	})
	b.Run("guarded", func(b *testing.B) {
		runBoth(b, &seq, func(ctx context.Context, n int64) error {
			res, err := g.Do(ctx, fmt.Sprintf("SN%d", n), func(ctx context.Context) error { return reduceStock(ctx, db, n) })
			if err == nil && res.Outcome != idempotency.Applied {
				return fmt.Errorf("outcome %v, want applied", res.Outcome)
			}
			return err
		})
	})
	b.Run("guard-only", func(b *testing.B) { // no effect: the guard's own round trips
		runBoth(b, &seq, func(ctx context.Context, n int64) error {
			_, err := g.Do(ctx, fmt.Sprintf("SN%d", n), func(context.Context) error { return nil })
			return err
		})
	})
}

func BenchmarkSQLGuard(b *testing.B) {
	db := setupBenchStock(b)
	g, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.CreateTable(context.Background(), db); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.Run("baseline", func(b *testing.B) { // the effect alone, autocommit
		runBoth(b, &seq, func(ctx context.Context, n int64) error { return reduceStock(ctx, db, n) })
	})
	b.Run("baseline-tx", func(b *testing.B) { // the effect alone in BEGIN ... COMMIT
		runBoth(b, &seq, func(ctx context.Context, n int64) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := reduceStock(ctx, tx, n); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		})
	})
	b.Run("guarded", func(b *testing.B) {
		runBoth(b, &seq, func(ctx context.Context, n int64) error {
			res, err := g.Do(ctx, db, fmt.Sprintf("SN%d", n), func(ctx context.Context, tx *sql.Tx) error { return reduceStock(ctx, tx, n) })
			if err == nil && res.Outcome != idempotency.Applied {
				return fmt.Errorf("outcome %v, want applied", res.Outcome)
			}
			return err
		})
	})
}
