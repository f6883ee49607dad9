// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// LockState is what the dashboard shows of a table's leader lock: ops.ReadLock's state (as
// `outbox-relay status` shows it) and the holder named in the lock's value. The lock's random
// token is never part of it.
type LockState struct {
	ops.LockState
	// Host and PID name the holder when its value says so (relays of this version do);
	// Since is when it took the lock.
	Host           string     `json:"host,omitempty"`
	PID            int        `json:"pid,omitempty"`
	Since          *time.Time `json:"since,omitempty"`
	HeldForSeconds float64    `json:"held_for_seconds,omitempty"`
	// ThisRelay is true when the holder is the process serving the page.
	ThisRelay bool `json:"this_relay"`
}

// readLock reads the lock at key: whether it is held, its time to live and its holder.
func readLock(ctx context.Context, rdb redis.Cmdable, key string, now time.Time) LockState {
	ls, err := ops.ReadLock(ctx, rdb, key)
	st := LockState{LockState: ls}
	if err == nil && ls.Held {
		var h ops.LockHolder
		var ok bool
		if h, ok, err = ops.ReadLockHolder(ctx, rdb, key); ok {
			st.Host, st.PID = h.Host, h.PID
			if !h.Since.IsZero() {
				st.Since, st.HeldForSeconds = &h.Since, now.Sub(h.Since).Seconds()
			}
			st.ThisRelay = h.PID == os.Getpid() && h.Host == hostname()
		}
	}
	if err != nil {
		st.Error = err.Error()
	}
	return st
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}
