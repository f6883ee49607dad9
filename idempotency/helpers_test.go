package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// appliedDDL is the business table of the tests: one row per order, n counting how many
// times the effect ran. Exactly once means n = 1 on every row.
const appliedDDL = `CREATE TABLE applied (
  order_sn varchar(64) NOT NULL PRIMARY KEY,
  n int NOT NULL
) ENGINE=InnoDB`

// applyOrder is the business effect: count one application of order sn.
func applyOrder(ctx context.Context, db idempotency.Execer, sn string) error {
	_, err := db.ExecContext(ctx, "INSERT INTO applied (order_sn, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", sn)
	return err
}

// appliedCount returns how many times the effect ran for sn.
func appliedCount(t testing.TB, db *sql.DB, sn string) int {
	t.Helper()
	var n int
	err := db.QueryRow("SELECT n FROM applied WHERE order_sn = ?", sn).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0
	}
	if err != nil {
		t.Fatalf("read applied %s: %v", sn, err)
	}
	return n
}

// assertEachAppliedOnce checks the business table: orders rows, each applied exactly once.
func assertEachAppliedOnce(t testing.TB, db *sql.DB, orders int) {
	t.Helper()
	var rows, total, maxN int
	if err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(MAX(n), 0) FROM applied").Scan(&rows, &total, &maxN); err != nil {
		t.Fatalf("read applied: %v", err)
	}
	if rows != orders || total != orders || maxN != 1 {
		t.Fatalf("business table: %d orders applied %d times in all (max %d per order), want %d orders applied once each", rows, total, maxN, orders)
	}
}

type redisBundle struct {
	db     *testenv.DB
	rdb    *redis.Client
	prefix string
	store  *idempotency.RedisStore
}

// setupRedis gives a fresh database with the applied table, and a RedisStore under a key
// prefix of the test's own.
func setupRedis(t testing.TB) *redisBundle {
	t.Helper()
	db := testenv.MySQL(t)
	if _, err := db.Exec(appliedDDL); err != nil {
		t.Fatalf("create applied: %v", err)
	}
	rdb, prefix := testenv.Redis(t)
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &redisBundle{db: db, rdb: rdb, prefix: prefix, store: store}
}

func (b *redisBundle) guard(t testing.TB, cfg idempotency.Config) *idempotency.Guard {
	t.Helper()
	if cfg.Group == "" {
		cfg.Group = "stock"
	}
	g, err := idempotency.NewGuard(b.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// value returns what Redis holds for key of group, "" if nothing.
func (b *redisBundle) value(t testing.TB, group, key string) string {
	t.Helper()
	v, err := b.rdb.Get(context.Background(), b.store.Key(group+":"+key)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	return v
}

type sqlBundle struct {
	db    *testenv.DB
	guard *idempotency.SQLGuard
}

// setupSQL gives a fresh database with the applied table and a dedupe table.
func setupSQL(t testing.TB) *sqlBundle {
	t.Helper()
	db := testenv.MySQL(t)
	if _, err := db.Exec(appliedDDL); err != nil {
		t.Fatalf("create applied: %v", err)
	}
	g, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return &sqlBundle{db: db, guard: g}
}

func dedupeRows(t testing.TB, db *sql.DB, key string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM outbox_dedupe WHERE dedupe_key = ?", key).Scan(&n); err != nil {
		t.Fatalf("count dedupe rows: %v", err)
	}
	return n
}

// deliverAll plays the broker: every order is delivered copies times, the copies of an order
// next to each other in a shuffled stream so that they reach different workers at the same
// time. A delivery that is InProgress or Failed with a retryable error is redelivered (at
// once, as the next thing that worker does) until it is acknowledged. It returns how many
// deliveries ended in each outcome.
func deliverAll(t *testing.T, orders, copies, workers int, do func(ctx context.Context, sn string) (idempotency.Outcome, error), retryable func(error) bool) map[idempotency.Outcome]int {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, 2))
	perm := rnd.Perm(orders)
	stream := make(chan string, orders*copies)
	for _, i := range perm {
		for range copies {
			stream <- fmt.Sprintf("SN%06d", i)
		}
	}
	close(stream)

	ctx := context.Background()
	var mu sync.Mutex
	counts := map[idempotency.Outcome]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sn := range stream {
				for {
					out, err := do(ctx, sn)
					mu.Lock()
					counts[out]++
					mu.Unlock()
					if out == idempotency.Applied || out == idempotency.Duplicate {
						if err != nil {
							errs <- fmt.Errorf("%s: %v: %w", sn, out, err)
							return
						}
						break
					}
					if err != nil && !retryable(err) {
						errs <- fmt.Errorf("%s: %v: %w", sn, out, err)
						return
					}
					runtime.Gosched() // redeliver
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return counts
}

func testLogger(t testing.TB) *zerolog.Logger {
	l := zerolog.New(zerolog.NewTestWriter(t))
	return &l
}

// waitFor polls cond every few milliseconds until it is true, failing the test after a
// generous deadline. It waits for a state, not for a duration.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}
