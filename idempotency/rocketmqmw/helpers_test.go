// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

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
	setupRedis            = idemtest.SetupRedis
	setupSQL              = idemtest.SetupSQL
)

// consumeFunc is the push consumer's callback type.
type consumeFunc = func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error)

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
