// SPDX-License-Identifier: Apache-2.0

// Package idemtest holds what the tests of package idempotency and its subpackages share:
// a business table that counts how many times each order's effect ran, so that exactly
// once can be asserted on real rows.
package idemtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// appliedDDL is the business table: one row per order, n counting how many times the
// effect ran. Exactly once means n = 1 on every row.
const appliedDDL = `CREATE TABLE applied (
  order_sn varchar(200) NOT NULL PRIMARY KEY,
  n int NOT NULL,
  seq bigint NOT NULL AUTO_INCREMENT UNIQUE
) ENGINE=InnoDB`

// Execer runs a statement: *sql.DB and *sql.Tx have it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// AppliedDB returns a fresh database of the test's own with the applied table.
func AppliedDB(t testing.TB) *testenv.DB {
	t.Helper()
	db := testenv.MySQL(t)
	if _, err := db.Exec(appliedDDL); err != nil {
		t.Fatalf("create applied: %v", err)
	}
	return db
}

// ApplyOrder is the business effect: count one application of order sn. The seq column
// keeps the order of first applications.
func ApplyOrder(ctx context.Context, db Execer, sn string) error {
	_, err := db.ExecContext(ctx, "INSERT INTO applied (order_sn, n) VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1", sn)
	return err
}

// AppliedCount returns how many times the effect ran for sn.
func AppliedCount(t testing.TB, db *sql.DB, sn string) int {
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

// AppliedInOrder returns the orders applied, in the order of their first application.
func AppliedInOrder(t testing.TB, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT order_sn FROM applied ORDER BY seq")
	if err != nil {
		t.Fatalf("read applied: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var sn string
		if err := rows.Scan(&sn); err != nil {
			t.Fatal(err)
		}
		out = append(out, sn)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// AssertEachAppliedOnce checks the business table: orders rows, each applied exactly once.
func AssertEachAppliedOnce(t testing.TB, db *sql.DB, orders int) {
	t.Helper()
	var rows, total, maxN int
	if err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(MAX(n), 0) FROM applied").Scan(&rows, &total, &maxN); err != nil {
		t.Fatalf("read applied: %v", err)
	}
	if rows != orders || total != orders || maxN != 1 {
		t.Fatalf("business table: %d orders applied %d times in all (max %d per order), want %d orders applied once each", rows, total, maxN, orders)
	}
}

// ExampleDB creates a database of its own on the test server for a godoc example, which
// has no testing.TB; done drops it. It panics when the server is unreachable: examples
// with output need it, as the tests do.
func ExampleDB() (db *sql.DB, done func()) {
	cfg, err := mysql.ParseDSN(testenv.MySQLServerDSN())
	if err != nil {
		panic(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	name := "outbox_ex_" + testenv.RandomSuffix(10)
	if _, err := admin.Exec("CREATE DATABASE " + name + " CHARACTER SET utf8mb4"); err != nil {
		panic(fmt.Sprintf("example database (run `make services`): %v", err))
	}
	cfg.DBName = name
	cfg.InterpolateParams = true
	db, err = sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	return db, func() {
		db.Close()
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name)
		admin.Close()
	}
}

// ExampleRedis returns a client on the test Redis and a key prefix of the example's own;
// done deletes the keys under it.
func ExampleRedis() (rdb *redis.Client, prefix string, done func()) {
	rdb = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	prefix = "outboxex:" + testenv.RandomSuffix(10) + ":"
	return rdb, prefix, func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		rdb.Close()
	}
}

// RedisBundle is a database with the applied table and a RedisStore under a key prefix of
// the test's own.
type RedisBundle struct {
	DB     *testenv.DB
	RDB    *redis.Client
	Prefix string
	Store  *idempotency.RedisStore
}

// SetupRedis returns a fresh RedisBundle.
func SetupRedis(t testing.TB) *RedisBundle {
	t.Helper()
	db := AppliedDB(t)
	rdb, prefix := testenv.Redis(t)
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &RedisBundle{DB: db, RDB: rdb, Prefix: prefix, Store: store}
}

// Guard returns a Guard on the bundle's store; the group defaults to "stock".
func (b *RedisBundle) Guard(t testing.TB, cfg idempotency.Config) *idempotency.Guard {
	t.Helper()
	if cfg.Group == "" {
		cfg.Group = "stock"
	}
	g, err := idempotency.NewGuard(b.Store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Value returns what Redis holds for key of group, "" if nothing.
func (b *RedisBundle) Value(t testing.TB, group, key string) string {
	t.Helper()
	v, err := b.RDB.Get(context.Background(), b.Store.Key(group+":"+key)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	return v
}

// SQLBundle is a database with the applied table, a dedupe table and a SQLGuard of group
// "stock" on it.
type SQLBundle struct {
	DB    *testenv.DB
	Guard *idempotency.SQLGuard
}

// SetupSQL returns a fresh SQLBundle.
func SetupSQL(t testing.TB) *SQLBundle {
	t.Helper()
	db := AppliedDB(t)
	g, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return &SQLBundle{DB: db, Guard: g}
}

// benchRows is the size of the benchmarks' stock table.
const benchRows = 1000

// BenchStock returns a fresh database with a stock table of 1,000 rows, the business table
// of the benchmarks.
func BenchStock(b *testing.B) *testenv.DB {
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

// ReduceStock is the benchmarks' business effect: decrement one of the 1,000 stock rows.
func ReduceStock(ctx context.Context, db Execer, n int64) error {
	_, err := db.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE id = ? AND qty > 0", n%benchRows)
	return err
}

// RunBoth runs one message per iteration, serially and from 8 goroutines; seq numbers the
// messages across every run so that keys never repeat.
func RunBoth(b *testing.B, seq *atomic.Int64, one func(ctx context.Context, n int64) error) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := one(ctx, seq.Add(1)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel8", func(b *testing.B) {
		b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
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
