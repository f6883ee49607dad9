// SPDX-License-Identifier: Apache-2.0

package backoff

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Defaults of a Policy, seed 002's schedule.
const (
	// DefaultBase is the delay for n = 0.
	DefaultBase = time.Second
	// DefaultMultiplier is the growth factor per failed attempt.
	DefaultMultiplier = 2.0
	// DefaultMax caps every delay.
	DefaultMax = time.Hour
)

// Policy is an exponential retry schedule: Delay(n) = min(Base * Multiplier^n, Max), spread by
// Jitter. The zero value is usable: WithDefaults fills the unset fields.
type Policy struct {
	// Base is the delay for n = 0. Defaults to 1 second.
	Base time.Duration
	// Multiplier is the growth factor per attempt; it must be at least 1. Defaults to 2.
	Multiplier float64
	// Max caps every delay, jitter included. Defaults to 1 hour.
	Max time.Duration
	// Jitter spreads each delay uniformly over [d*(1-Jitter), d*(1+Jitter)] (then capped at
	// Max) so that messages failing together do not retry together. It must be in [0, 1].
	// Defaults to 0 (no jitter).
	Jitter float64
}

// Default returns seed 002's schedule: base 1s, multiplier 2, max 1h, no jitter.
func Default() Policy {
	return Policy{Base: DefaultBase, Multiplier: DefaultMultiplier, Max: DefaultMax}
}

// WithDefaults returns p with its zero Base, Multiplier and Max replaced by the defaults.
// Jitter keeps its value, since zero is its default.
func (p Policy) WithDefaults() Policy {
	if p.Base == 0 {
		p.Base = DefaultBase
	}
	if p.Multiplier == 0 {
		p.Multiplier = DefaultMultiplier
	}
	if p.Max == 0 {
		p.Max = DefaultMax
	}
	return p
}

// Validate reports the first field that is out of range, naming it.
func (p Policy) Validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("backoff: Base must be positive, got %s", p.Base)
	case math.IsNaN(p.Multiplier) || math.IsInf(p.Multiplier, 0) || p.Multiplier < 1:
		return fmt.Errorf("backoff: Multiplier must be a finite number >= 1, got %v", p.Multiplier)
	case p.Max < p.Base:
		return fmt.Errorf("backoff: Max must be at least Base (%s), got %s", p.Base, p.Max)
	case math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("backoff: Jitter must be between 0 and 1, got %v", p.Jitter)
	}
	return nil
}

// Delay returns the wait before attempt n+1, n being the number of failed attempts so far.
// A negative n counts as 0. The computation runs in floating point and is capped at Max, so
// any n, however large, gives at most Max and never overflows. rnd supplies uniform numbers
// in [0, 1) for the jitter (for example a seeded (*rand.Rand).Float64 from math/rand/v2);
// when it is nil the process-wide source of math/rand/v2 is used. With Jitter = 0, rnd is
// never called. Delay assumes a policy that passes Validate; it never returns less than 0.
func (p Policy) Delay(n int, rnd func() float64) time.Duration {
	if n < 0 {
		n = 0
	}
	maxF := float64(p.Max)
	d := float64(p.Base) * math.Pow(p.Multiplier, float64(n))
	if math.IsNaN(d) || d > maxF {
		d = maxF // +Inf lands here too
	}
	if p.Jitter > 0 {
		if rnd == nil {
			rnd = rand.Float64
		}
		d *= 1 + p.Jitter*(2*rnd()-1)
		if d > maxF {
			d = maxF
		}
	}
	if d < 0 || math.IsNaN(d) {
		return 0
	}
	if d >= maxF {
		return p.Max // avoids float64 -> int64 rounding past Max near MaxInt64
	}
	return time.Duration(d)
}
