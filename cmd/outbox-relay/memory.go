// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/relay"
)

// cgroupLimitFiles are where a container's memory limit is read: cgroup v2, then v1.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// containerMemoryLimit returns the memory limit of the process's cgroup, 0 when it has none
// or none can be read ("max", or v1's huge "no limit" value).
func containerMemoryLimit() int64 {
	for _, f := range cgroupLimitFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0 // "max": no limit
		}
		return n
	}
	return 0
}

// memoryLimitFraction is the share of the memory limit given to GOMEMLIMIT: the rest is the
// runtime's and the kernel's (stacks, socket buffers) headroom under the container's limit.
const memoryLimitFraction = 0.7

// setupMemory returns the budget of message bodies for the relays of the process, derived
// from relay.memory_limit or else the container's limit, and sets the Go runtime's soft
// memory limit from the same figure unless GOMEMLIMIT is set in the environment.
func setupMemory(rc config.Relay, log zerolog.Logger) *relay.MemoryBudget {
	limit, from := rc.MemoryLimit, "relay.memory_limit"
	if limit == 0 {
		limit, from = containerMemoryLimit(), "the container's memory limit"
	}
	if limit == 0 {
		log.Info().Int64("body_budget", config.DefaultMemoryBudget).Msg("memory: no limit set or found (relay.memory_limit, cgroup); message bodies held at once bounded by the default budget")
		return relay.NewMemoryBudget(config.DefaultMemoryBudget)
	}
	budget := limit / config.MemoryBudgetShare
	ev := log.Info().Int64("memory_limit", limit).Str("from", from).Int64("body_budget", budget)
	if os.Getenv("GOMEMLIMIT") == "" {
		soft := int64(float64(limit) * memoryLimitFraction)
		debug.SetMemoryLimit(soft)
		ev = ev.Int64("gomemlimit", soft)
	} else {
		ev = ev.Str("gomemlimit", "set by the environment")
	}
	ev.Msg("memory: message bodies held at once bounded")
	return relay.NewMemoryBudget(budget)
}
