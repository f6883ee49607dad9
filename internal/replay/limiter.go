// SPDX-License-Identifier: Apache-2.0

package replay

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Clock is the time a replay's rate limit is measured by; tests inject their own.
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, whichever comes first.
	Sleep(ctx context.Context, d time.Duration) error
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits for d or ctx.
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Limiter is a token bucket: Rate tokens a second, at most Burst held. Over any interval of
// length T from the start it hands out at most Burst + Rate*T tokens.
type Limiter struct {
	mu     sync.Mutex // one Wait at a time: waiters are served in turn
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
	clock  Clock
}

// NewLimiter returns a full bucket of burst tokens refilled at rate a second by clock.
func NewLimiter(rate float64, burst int, clock Clock) (*Limiter, error) {
	if rate <= 0 || burst < 1 {
		return nil, fmt.Errorf("rate limit %g/s with burst %d: both must be positive", rate, burst)
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &Limiter{rate: rate, burst: float64(burst), tokens: float64(burst), last: clock.Now(), clock: clock}, nil
}

// Wait takes n tokens (n at most the burst), waiting on the clock until they are there.
func (l *Limiter) Wait(ctx context.Context, n int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	need := float64(n)
	if need > l.burst {
		return fmt.Errorf("rate limiter: %d tokens asked at once, over the burst of %g", n, l.burst)
	}
	for {
		now := l.clock.Now()
		if el := now.Sub(l.last); el > 0 {
			l.tokens = min(l.burst, l.tokens+el.Seconds()*l.rate)
		}
		l.last = now
		if l.tokens >= need {
			l.tokens -= need
			return nil
		}
		wait := time.Duration((need - l.tokens) / l.rate * float64(time.Second))
		if err := l.clock.Sleep(ctx, max(wait, time.Microsecond)); err != nil {
			return err
		}
	}
}
