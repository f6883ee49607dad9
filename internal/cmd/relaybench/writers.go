// SPDX-License-Identifier: Apache-2.0

package main

import (
	"flag"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
)

// registerMix adds the writers' flags, with rate as the default transactions per second.
func registerMix(fs *flag.FlagSet, m *loadgen.Mix, rate float64) {
	fs.IntVar(&m.Writers, "writers", 8, "concurrent writers")
	fs.Float64Var(&m.Rate, "rate", rate, "target transactions per second, all writers together")
	fs.Float64Var(&m.HoldShare, "hold-share", 0.25, "share of transactions held open after their inserts")
	fs.DurationVar(&m.HoldMax, "hold-max", 50*time.Millisecond, "a held transaction waits uniformly up to this long before commit")
	fs.Float64Var(&m.RollbackShare, "rollback-share", 0.2, "share of transactions rolled back")
}
