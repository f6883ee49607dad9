// SPDX-License-Identifier: Apache-2.0

package backoff

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestDelayDefault(t *testing.T) {
	t.Parallel()
	p := Default()
	tests := []struct {
		n    int
		want time.Duration
	}{
		{math.MinInt, time.Second},
		{-1, time.Second},
		{0, time.Second},
		{1, 2 * time.Second},
		{2, 4 * time.Second},
		{3, 8 * time.Second},
		{11, 2048 * time.Second},
		{12, time.Hour}, // 4096s > 3600s
		{63, time.Hour},
		{64, time.Hour},
		{1 << 20, time.Hour},
		{math.MaxInt, time.Hour},
	}
	for _, tt := range tests {
		if got := p.Delay(tt.n, nil); got != tt.want {
			t.Errorf("Delay(%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
}

func TestDelayExtremes(t *testing.T) {
	t.Parallel()
	huge := Policy{Base: time.Duration(math.MaxInt64 / 2), Multiplier: 1e300, Max: time.Duration(math.MaxInt64)}
	for _, n := range []int{0, 1, 2, 1000, math.MaxInt} {
		if got := huge.Delay(n, nil); got < 0 || got > huge.Max {
			t.Errorf("huge.Delay(%d) = %d, outside [0, Max]", n, got)
		}
	}
	flat := Policy{Base: 5 * time.Second, Multiplier: 1, Max: 5 * time.Second}
	if got := flat.Delay(math.MaxInt, nil); got != 5*time.Second {
		t.Errorf("flat.Delay = %s, want 5s", got)
	}
	custom := Policy{Base: 100 * time.Millisecond, Multiplier: 3, Max: time.Minute}
	if got := custom.Delay(2, nil); got != 900*time.Millisecond {
		t.Errorf("custom.Delay(2) = %s, want 900ms", got)
	}
}

func TestDelayJitterBounds(t *testing.T) {
	t.Parallel()
	p := Policy{Base: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 0.25}
	r := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 20; n++ {
		plain := Default().Delay(n, nil)
		lo := time.Duration(float64(plain) * 0.75)
		hi := min(time.Duration(float64(plain)*1.25), time.Hour)
		for i := 0; i < 200; i++ {
			got := p.Delay(n, r.Float64)
			if got < lo || got > hi {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", n, got, lo, hi)
			}
		}
	}
	// The extremes of the random source map onto the bounds.
	if got := p.Delay(0, func() float64 { return 0 }); got != 750*time.Millisecond {
		t.Errorf("rnd=0: %s, want 750ms", got)
	}
	if got := p.Delay(0, func() float64 { return 1 }); got != 1250*time.Millisecond {
		t.Errorf("rnd=1: %s, want 1.25s", got)
	}
	full := Policy{Base: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 1}
	if got := full.Delay(0, func() float64 { return 0 }); got != 0 {
		t.Errorf("jitter 1, rnd=0: %s, want 0", got)
	}
}

func TestDelayDeterministic(t *testing.T) {
	t.Parallel()
	p := Policy{Base: time.Second, Multiplier: 2, Max: time.Hour, Jitter: 0.5}
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for n := 0; n < 50; n++ {
		if x, y := p.Delay(n, a.Float64), p.Delay(n, b.Float64); x != y {
			t.Fatalf("n=%d: %s != %s with the same seed", n, x, y)
		}
	}
	calls := 0
	Default().Delay(3, func() float64 { calls++; return 0.5 })
	if calls != 0 {
		t.Errorf("rnd called %d times with Jitter = 0", calls)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		p     Policy
		field string // "" = valid
	}{
		{"default", Default(), ""},
		{"zero with defaults", Policy{}.WithDefaults(), ""},
		{"full jitter", Policy{Base: 1, Multiplier: 1, Max: 1, Jitter: 1}, ""},
		{"zero base", Policy{Multiplier: 2, Max: time.Hour}, "Base"},
		{"negative base", Policy{Base: -1, Multiplier: 2, Max: time.Hour}, "Base"},
		{"multiplier below 1", Policy{Base: 1, Multiplier: 0.5, Max: time.Hour}, "Multiplier"},
		{"multiplier NaN", Policy{Base: 1, Multiplier: math.NaN(), Max: time.Hour}, "Multiplier"},
		{"multiplier Inf", Policy{Base: 1, Multiplier: math.Inf(1), Max: time.Hour}, "Multiplier"},
		{"max below base", Policy{Base: time.Minute, Multiplier: 2, Max: time.Second}, "Max"},
		{"negative jitter", Policy{Base: 1, Multiplier: 2, Max: 2, Jitter: -0.1}, "Jitter"},
		{"jitter above 1", Policy{Base: 1, Multiplier: 2, Max: 2, Jitter: 1.5}, "Jitter"},
		{"jitter NaN", Policy{Base: 1, Multiplier: 2, Max: 2, Jitter: math.NaN()}, "Jitter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.p.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.field)
			}
		})
	}
}

func TestWithDefaultsKeepsSetFields(t *testing.T) {
	t.Parallel()
	p := Policy{Base: 3 * time.Second, Jitter: 0.1}.WithDefaults()
	want := Policy{Base: 3 * time.Second, Multiplier: 2, Max: time.Hour, Jitter: 0.1}
	if p != want {
		t.Fatalf("WithDefaults() = %+v, want %+v", p, want)
	}
}
