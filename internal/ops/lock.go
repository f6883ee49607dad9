// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// LockState is who holds a table's leader lock, as read from Redis.
type LockState struct {
	// Key is the lock's Redis key (config lock.key, placeholders filled in).
	Key string `json:"key"`
	// Held reports whether a relay holds the lock. Which one is named in the lock's value
	// (see ReadLockHolder); the leader's log and its outbox_relay_leader gauge say it too.
	Held bool `json:"held"`
	// TTL is the time left before the lock expires unless its holder extends it (every
	// third of lock.ttl); 0 when free.
	TTL time.Duration `json:"-"`
	// TTLMillis is TTL in milliseconds, for JSON.
	TTLMillis int64 `json:"ttl_ms"`
	// Holder names the relay holding the lock ("host pid N") when the lock's value says so
	// (see ReadLockHolder), filled in by the caller; empty when free or not named.
	Holder string `json:"holder,omitempty"`
	// Error is set when Redis could not be read; Held is then meaningless.
	Error string `json:"error,omitempty"`
}

// ReadLock reads the state of the lock at key: held with the time left, or free.
func ReadLock(ctx context.Context, rdb redis.Cmdable, key string) (LockState, error) {
	st := LockState{Key: key}
	ttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("read lock %s: %w", key, err)
	}
	// go-redis returns PTTL's -2 (no such key) and -1 (no expiry, which redsync never sets;
	// shown as held without a TTL) as raw Durations, not as milliseconds.
	if ttl == -2 {
		return st, nil
	}
	st.Held = true
	if ttl > 0 {
		st.TTL, st.TTLMillis = ttl, ttl.Milliseconds()
	}
	return st, nil
}
