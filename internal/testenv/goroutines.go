// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"runtime"
	"slices"
	"strings"
	"testing"
)

// Goroutines returns the goroutines whose stack (a frame, or the frame that created it)
// contains one of marks, such as "outbox-relay/relay.", by id, each with its stack.
func Goroutines(marks ...string) map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(g, m) }) {
			continue
		}
		if f := strings.Fields(g); len(f) > 1 && f[0] == "goroutine" {
			out[f[1]] = g
		}
	}
	return out
}

// NoGoroutinesLeft fails the test, with their stacks, if goroutines marked by one of marks
// (Goroutines) run now that were not in before, what Goroutines returned earlier.
func NoGoroutinesLeft(tb testing.TB, before map[string]string, marks ...string) {
	tb.Helper()
	var left []string
	for id, stack := range Goroutines(marks...) {
		if _, ok := before[id]; !ok {
			left = append(left, stack)
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		tb.Fatalf("%d goroutines still run:\n\n%s", len(left), strings.Join(left, "\n\n"))
	}
}
