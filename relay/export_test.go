// SPDX-License-Identifier: Apache-2.0

package relay

import "time"

// WithClock returns cfg with the relay's own clock replaced by now: a test's host clock that
// is off.
func WithClock(cfg Config, now func() time.Time) Config {
	cfg.now = now
	return cfg
}
