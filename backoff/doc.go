// SPDX-License-Identifier: Apache-2.0

// Package backoff computes how long the relay waits before it retries a message that failed.
//
// The default schedule is seed 002's: min(base * 2^n, max) with base 1s and max 1h, so the
// waits after the 1st, 2nd, 3rd failure are 2s, 4s, 8s, ... capped at one hour. A Policy is a
// plain value: Delay is pure, and deterministic given the random source it is handed, so the
// relay, its tests and an operator reading the docs all agree on the schedule.
package backoff
