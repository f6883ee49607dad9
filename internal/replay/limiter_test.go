// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"context"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when slept on.
type fakeClock struct {
	now    time.Time
	slept  time.Duration
	sleeps int
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	c.slept += d
	c.sleeps++
	return ctx.Err()
}

// TestLimiterHoldsTheRate: after every Wait, the tokens handed out since the start are at most
// the burst plus rate times the time passed on the injected clock, and, once it has had to
// wait, at least that less one request's worth: the limit is held, and reached.
func TestLimiterHoldsTheRate(t *testing.T) {
	for _, c := range []struct {
		rate  float64
		burst int
		n     int
	}{{100, 10, 1}, {100, 10, 7}, {2500, 32, 32}, {0.5, 1, 1}, {333, 50, 13}} {
		clock := newFakeClock()
		start := clock.Now()
		lim, err := NewLimiter(c.rate, c.burst, clock)
		if err != nil {
			t.Fatal(err)
		}
		var taken float64
		for i := 0; i < 400; i++ {
			if err := lim.Wait(context.Background(), c.n); err != nil {
				t.Fatal(err)
			}
			taken += float64(c.n)
			allowed := float64(c.burst) + c.rate*clock.Now().Sub(start).Seconds()
			if taken > allowed+1e-6 {
				t.Fatalf("rate %g burst %d: %g taken after %s, over the %g allowed", c.rate, c.burst, taken, clock.Now().Sub(start), allowed)
			}
			if clock.sleeps > 0 && taken < allowed-float64(c.n)-1e-6 { // once waiting, never idle
				t.Fatalf("rate %g burst %d: %g taken after %s, below the %g allowed less one request", c.rate, c.burst, taken, clock.Now().Sub(start), allowed)
			}
		}
	}
}

// TestLimiterRefusesWhatItCannotGive: a request over the burst, or a rate of 0, is an error,
// not a wait forever.
func TestLimiterRefusesWhatItCannotGive(t *testing.T) {
	if _, err := NewLimiter(0, 10, nil); err == nil {
		t.Error("rate 0 accepted")
	}
	lim, err := NewLimiter(10, 5, newFakeClock())
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Wait(context.Background(), 6); err == nil {
		t.Error("6 tokens at once from a burst of 5 accepted")
	}
}
