// SPDX-License-Identifier: Apache-2.0

package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/idempotency"
)

func TestRedisGuardEachOrderAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	const orders, copies, workers = 1000, 3, 8

	counts := deliverAll(t, orders, copies, workers, func(ctx context.Context, sn string) (idempotency.Result, error) {
		// The effect is a plain autocommit UPDATE in MariaDB, outside any transaction.
		return g.Do(ctx, sn, func(ctx context.Context) error { return applyOrder(ctx, b.DB, sn) })
	}, func(error) bool { return false })

	assertEachAppliedOnce(t, b.DB.DB, orders)
	if counts[idempotency.Applied] != orders || counts[idempotency.Duplicate] != orders*(copies-1) {
		t.Errorf("outcomes %v, want %d applied and %d duplicates", counts, orders, orders*(copies-1))
	}
	t.Logf("outcomes: %v", counts)
	if v := b.Value(t, "stock", "SN000000"); v != "consumed" {
		t.Errorf("stored value %q, want consumed", v)
	}
}

func TestRedisGuardHandlerFailureReleasesClaim(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	ctx := context.Background()
	boom := errors.New("stock service down")

	out, err := oc(g.Do(ctx, "SN1", func(context.Context) error { return boom }))
	if out != idempotency.Failed || !errors.Is(err, boom) {
		t.Fatalf("failing handler: %v, %v; want failed wrapping the handler's error", out, err)
	}
	if v := b.Value(t, "stock", "SN1"); v != "" {
		t.Fatalf("after a failure the key holds %q, want it released", v)
	}
	if n := appliedCount(t, b.DB.DB, "SN1"); n != 0 {
		t.Fatalf("applied %d times after a failure", n)
	}

	for i, want := range []idempotency.Outcome{idempotency.Applied, idempotency.Duplicate} {
		out, err := oc(g.Do(ctx, "SN1", func(ctx context.Context) error { return applyOrder(ctx, b.DB, "SN1") }))
		if out != want || err != nil {
			t.Fatalf("redelivery %d: %v, %v; want %v", i+1, out, err, want)
		}
	}
	if n := appliedCount(t, b.DB.DB, "SN1"); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
}

func TestRedisGuardPanicReleasesClaim(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		_, _ = oc(g.Do(context.Background(), "SN1", func(context.Context) error { panic("handler bug") }))
	}()
	if v := b.Value(t, "stock", "SN1"); v != "" {
		t.Fatalf("after a panic the key holds %q, want it released", v)
	}
}

// A consumer stalls in the middle of a message (a GC pause, a hung call) past its claim
// TTL: another consumer takes the message over and applies it; the stalled one, waking up,
// can neither mark it consumed nor release it.
func TestRedisGuardExpiredClaimIsTakenOver(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{ClaimTTL: 300 * time.Millisecond})
	ctx := context.Background()

	for _, tc := range []struct {
		name    string
		wakeErr error // what the stalled handler returns when it wakes up
		wantOut idempotency.Outcome
	}{
		{"stalled handler succeeds", nil, idempotency.Applied},
		{"stalled handler fails", errors.New("timeout talking to the warehouse"), idempotency.Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sn := "SN-" + tc.name
			started, wake := make(chan struct{}), make(chan struct{})
			type result struct {
				res idempotency.Result
				err error
			}
			slow := make(chan result, 1)
			go func() {
				res, err := g.Do(ctx, sn, func(context.Context) error {
					close(started)
					<-wake
					return tc.wakeErr // it never got to apply the effect
				})
				slow <- result{res, err}
			}()
			<-started
			if out, err := oc(g.Do(ctx, sn, func(context.Context) error { return nil })); out != idempotency.InProgress || !errors.Is(err, idempotency.ErrInProgress) {
				t.Fatalf("while claimed: %v, %v; want in progress with ErrInProgress", out, err)
			}
			waitFor(t, "the claim to expire", func() bool { return b.Value(t, "stock", sn) == "" })

			out, err := oc(g.Do(ctx, sn, func(ctx context.Context) error { return applyOrder(ctx, b.DB, sn) }))
			if out != idempotency.Applied || err != nil {
				t.Fatalf("takeover: %v, %v; want applied", out, err)
			}
			close(wake)
			r := <-slow
			// A success is Applied with a nil error (do not redeliver) and the lost claim in
			// NotRecorded; a failure is Failed with the error (redeliver).
			lost := r.err
			if tc.wantOut == idempotency.Applied {
				if r.err != nil {
					t.Fatalf("stalled consumer succeeded: error %v, want nil (the effect happened)", r.err)
				}
				lost = r.res.NotRecorded
			}
			if r.res.Outcome != tc.wantOut || !errors.Is(lost, idempotency.ErrClaimLost) {
				t.Fatalf("stalled consumer: %v, %v (not recorded: %v); want %v with ErrClaimLost", r.res.Outcome, r.err, r.res.NotRecorded, tc.wantOut)
			}
			if tc.wakeErr != nil && !errors.Is(r.err, tc.wakeErr) {
				t.Errorf("stalled consumer's error %v lost the handler's error", r.err)
			}
			if v := b.Value(t, "stock", sn); v != "consumed" {
				t.Fatalf("stored value %q after the stalled consumer woke, want consumed", v)
			}
			if n := appliedCount(t, b.DB.DB, sn); n != 1 {
				t.Fatalf("applied %d times, want 1", n)
			}
			if out, _ := oc(g.Do(ctx, sn, func(context.Context) error { return nil })); out != idempotency.Duplicate {
				t.Fatalf("redelivery after takeover: %v, want duplicate", out)
			}
		})
	}
}

// TestRedisStoreContract checks the Store contract on RedisStore directly.
func TestRedisStoreContract(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	s := b.Store
	ctx := context.Background()
	pttl := func(key string) time.Duration {
		d, err := b.RDB.PTTL(ctx, s.Key(key)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	if r, err := s.Claim(ctx, "k", "tokA", time.Minute); r != idempotency.ClaimAcquired || err != nil {
		t.Fatalf("first claim: %v, %v", r, err)
	}
	if v, _ := b.RDB.Get(ctx, s.Key("k")).Result(); v != "consuming:tokA" {
		t.Fatalf("claimed value %q, want consuming:tokA", v)
	}
	if d := pttl("k"); d <= 0 || d > time.Minute {
		t.Fatalf("claim TTL %s, want in (0, 1m]", d)
	}
	if r, err := s.Claim(ctx, "k", "tokB", time.Minute); r != idempotency.ClaimHeld || err != nil {
		t.Fatalf("second claim: %v, %v; want held", r, err)
	}
	if err := s.Finish(ctx, "k", "tokB", time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("finish with another token: %v, want ErrClaimLost", err)
	}
	if err := s.Release(ctx, "k", "tokB"); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("release with another token: %v, want ErrClaimLost", err)
	}
	if err := s.Finish(ctx, "k", "tokA", time.Hour); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if v, _ := b.RDB.Get(ctx, s.Key("k")).Result(); v != "consumed" {
		t.Fatalf("finished value %q, want consumed", v)
	}
	if d := pttl("k"); d <= time.Minute || d > time.Hour {
		t.Fatalf("retention TTL %s, want in (1m, 1h]", d)
	}
	if r, err := s.Claim(ctx, "k", "tokC", time.Minute); r != idempotency.ClaimConsumed || err != nil {
		t.Fatalf("claim of a consumed key: %v, %v", r, err)
	}
	// The owner itself cannot release or finish twice once consumed.
	if err := s.Release(ctx, "k", "tokA"); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("release after finish: %v, want ErrClaimLost", err)
	}
	if err := s.Finish(ctx, "absent", "tokA", time.Hour); !errors.Is(err, idempotency.ErrClaimLost) {
		t.Fatalf("finish of an absent key: %v, want ErrClaimLost", err)
	}
	if n, _ := b.RDB.Exists(ctx, s.Key("absent")).Result(); n != 0 {
		t.Fatal("finish of an absent key created it")
	}
}

func TestRedisGuardTwoGroupsEachApply(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	stock, points := b.Guard(t, idempotency.Config{Group: "stock"}), b.Guard(t, idempotency.Config{Group: "points"})
	ctx := context.Background()
	for _, g := range []*idempotency.Guard{stock, points} {
		if out, err := oc(g.Do(ctx, "SN1", func(context.Context) error { return nil })); out != idempotency.Applied || err != nil {
			t.Fatalf("%v, %v; want each group to apply", out, err)
		}
	}
}

func TestRedisGuardEmptyKey(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	called := false
	out, err := oc(g.Do(context.Background(), "", func(context.Context) error { called = true; return nil }))
	if out != idempotency.Failed || !errors.Is(err, idempotency.ErrNoKey) || called {
		t.Fatalf("empty key: %v, %v, called %v; want failed with ErrNoKey, handler not called", out, err, called)
	}
}

func TestRedisStoreUnreachable(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	out, err := oc(g.Do(ctx, "SN1", func(context.Context) error { called = true; return nil }))
	if out != idempotency.Failed || err == nil || called {
		t.Fatalf("store unreachable: %v, %v, called %v; want failed, handler not called", out, err, called)
	}
}
