package idempotency_test

import (
	"context"
	"database/sql"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// The benchmarks measure the per-message cost of each guard around the same business
// effect, a stock decrement (UPDATE of one of 1,000 rows), next to that effect alone, so
// that the overhead reads as a ratio of the baseline in the same run. Every message has a
// new key: the price of a first delivery, the common case. "serial" is one consumer
// goroutine; "parallel8" runs 8 (the push consumer runs 20 by default).

const benchRows = 1000

func setupBenchStock(b *testing.B) *testenv.DB {
	db := testenv.MySQL(b)
	if _, err := db.Exec("CREATE TABLE stock (id int NOT NULL PRIMARY KEY, qty bigint NOT NULL) ENGINE=InnoDB"); err != nil {
		b.Fatal(err)
	}
	for i := range benchRows {
		if _, err := db.Exec("INSERT INTO stock VALUES (?, 1000000000)", i); err != nil {
			b.Fatal(err)
		}
	}
	return db
}

func reduceStock(ctx context.Context, db idempotency.Execer, n int64) error {
	_, err := db.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE id = ? AND qty > 0", n%benchRows)
	return err
}

// runBoth runs one message per iteration, serially and from 8 goroutines; seq numbers the
// messages across every run so that keys never repeat.
func runBoth(b *testing.B, seq *atomic.Int64, one func(ctx context.Context, n int64) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := one(ctx, seq.Add(1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel8", func(b *testing.B) {
		b.SetParallelism(max(1, 8/testingProcs()))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := one(ctx, seq.Add(1)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

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

func testingProcs() int { return runtime.GOMAXPROCS(0) }
