// SPDX-License-Identifier: Apache-2.0

package backoff_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/outbox-relay/outbox-relay/backoff"
)

// The default schedule doubles from one second and stops growing at one hour.
func ExamplePolicy_Delay() {
	p := backoff.Default()
	for _, n := range []int{0, 1, 2, 3, 11, 12, 1000} {
		fmt.Printf("n=%d: %s\n", n, p.Delay(n, nil))
	}
	// Output:
	// n=0: 1s
	// n=1: 2s
	// n=2: 4s
	// n=3: 8s
	// n=11: 34m8s
	// n=12: 1h0m0s
	// n=1000: 1h0m0s
}

// With jitter, a seeded source gives a reproducible spread around the schedule.
func ExamplePolicy_Delay_jitter() {
	p := backoff.Policy{Base: time.Second, Multiplier: 2, Max: time.Minute, Jitter: 0.2}
	r := rand.New(rand.NewPCG(42, 42))
	d := p.Delay(3, r.Float64) // 8s ± 20%
	fmt.Println(d >= 6400*time.Millisecond && d <= 9600*time.Millisecond)
	// Output: true
}
