// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// TestMemoryBudgetFromTheContainerLimit: without relay.memory_limit the bodies' budget is
// 1/16 of the cgroup's memory.max and GOMEMLIMIT 70 % of it; "max" (no limit) gives the
// default budget; relay.memory_limit wins over the cgroup.
func TestMemoryBudgetFromTheContainerLimit(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set in the environment: the relay leaves it alone")
	}
	old := cgroupLimitFiles
	oldLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { cgroupLimitFiles = old; debug.SetMemoryLimit(oldLimit) })
	f := filepath.Join(t.TempDir(), "memory.max")
	cgroupLimitFiles = []string{f}
	log := zerolog.Nop()
	for _, tc := range []struct {
		file    string
		setting int64
		budget  int64
		soft    int64
	}{
		{"134217728\n", 0, 8 << 20, 134217728 * 7 / 10},
		{"max\n", 0, config.DefaultMemoryBudget, -1},
		{"134217728\n", 256 << 20, 16 << 20, (256 << 20) * 7 / 10},
	} {
		if err := os.WriteFile(f, []byte(tc.file), 0o600); err != nil {
			t.Fatal(err)
		}
		debug.SetMemoryLimit(oldLimit)
		b := setupMemory(config.Relay{MemoryLimit: tc.setting}, log)
		if b.Limit() != tc.budget {
			t.Errorf("memory.max %q, relay.memory_limit %d: budget %d, want %d", tc.file, tc.setting, b.Limit(), tc.budget)
		}
		want := tc.soft
		if want < 0 {
			want = oldLimit // left alone
		}
		if got := debug.SetMemoryLimit(-1); got != want {
			t.Errorf("memory.max %q, relay.memory_limit %d: GOMEMLIMIT %d, want %d", tc.file, tc.setting, got, want)
		}
	}
}
