package rocketmqmw_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/internal/idemtest"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

var (
	exampleDB             = idemtest.ExampleDB
	exampleRedis          = idemtest.ExampleRedis
	applyOrder            = idemtest.ApplyOrder
	appliedCount          = idemtest.AppliedCount
	assertEachAppliedOnce = idemtest.AssertEachAppliedOnce
)

// consumeFunc is the push consumer's callback type.
type consumeFunc = func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error)

type redisBundle struct {
	db    *testenv.DB
	rdb   *redis.Client
	store *idempotency.RedisStore
}

func setupRedis(t testing.TB) *redisBundle {
	t.Helper()
	db := idemtest.AppliedDB(t)
	rdb, prefix := testenv.Redis(t)
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return &redisBundle{db: db, rdb: rdb, store: store}
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

// value returns what Redis holds for identity id of group, "" if nothing.
func (b *redisBundle) value(t testing.TB, group, id string) string {
	t.Helper()
	v, err := b.rdb.Get(context.Background(), b.store.Key(group+":"+id)).Result()
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

func setupSQL(t testing.TB) *sqlBundle {
	t.Helper()
	db := idemtest.AppliedDB(t)
	g, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.CreateTable(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return &sqlBundle{db: db, guard: g}
}

// wrap builds the Redis-guarded middleware, closed at the end of the test.
func wrap(t testing.TB, g *idempotency.Guard, cfg rocketmqmw.Config, h rocketmqmw.Handler) (consumeFunc, error) {
	mw, err := rocketmqmw.New(g, cfg, h)
	if err != nil {
		return nil, err
	}
	t.Cleanup(mw.Close)
	return mw.Consume, nil
}

// wrapTx builds the SQL-guarded middleware, closed at the end of the test.
func wrapTx(t testing.TB, g *idempotency.SQLGuard, db idempotency.Beginner, cfg rocketmqmw.Config, h rocketmqmw.TxHandler) (consumeFunc, error) {
	mw, err := rocketmqmw.NewTx(g, db, cfg, h)
	if err != nil {
		return nil, err
	}
	t.Cleanup(mw.Close)
	return mw.Consume, nil
}

// testLogger logs to the test's output.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, what, cond)
}
