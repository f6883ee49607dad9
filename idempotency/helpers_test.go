// SPDX-License-Identifier: Apache-2.0

package idempotency_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/internal/idemtest"
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
func deliverAll(t *testing.T, orders, copies, workers int, do func(ctx context.Context, sn string) (idempotency.Result, error), retryable func(error) bool) map[idempotency.Outcome]int {
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
					res, err := do(ctx, sn)
					out := res.Outcome
					mu.Lock()
					counts[out]++
					mu.Unlock()
					if err == nil {
						if !out.Ack() || res.NotRecorded != nil {
							errs <- fmt.Errorf("%s: %v with a nil error (not recorded: %v)", sn, out, res.NotRecorded)
							return
						}
						break
					}
					if out == idempotency.Applied || out == idempotency.Duplicate {
						errs <- fmt.Errorf("%s: %v with error %w", sn, out, err)
						return
					}
					if out != idempotency.InProgress && !retryable(err) {
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

// waitFor polls cond until it is true, failing the test after a generous deadline.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, what, cond)
}

// oc keeps a Do's outcome and error, for tests that assert on both.
func oc(r idempotency.Result, err error) (idempotency.Outcome, error) { return r.Outcome, err }
