// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
)

func redisOn(t *testing.T, lines ...string) *redis.Client {
	t.Helper()
	p := redistest.Server(t, lines...)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// A server that refuses CONFIG (as managed services do) and has no append-only file may have
// no persistence at all: the store refuses it, at open and at its first claim.
func TestRedisStoreRefusesAServerWhosePersistenceCannotBeRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redisOn(t, `rename-command CONFIG ""`)
	if _, err := OpenRedisStore(ctx, rdb, RedisConfig{}); !errors.Is(err, ErrUnsafeRedis) || !strings.Contains(err.Error(), "CONFIG") {
		t.Fatalf("OpenRedisStore on a server without AOF that refuses CONFIG = %v; want ErrUnsafeRedis naming CONFIG", err)
	}
	store, err := NewRedisStore(rdb, RedisConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Claim(ctx, "SN-1", "t1", time.Minute); !errors.Is(err, ErrUnsafeRedis) {
		t.Fatalf("claim on NewRedisStore of that server = %v; want ErrUnsafeRedis", err)
	}
	if n, _ := rdb.Exists(ctx, store.Key("SN-1")).Result(); n != 0 {
		t.Fatal("the refused claim was written")
	}
}

// The store reads the server's settings again every CheckInterval: persistence turned off
// after the store opened makes later claims fail (the message is redelivered later) until it
// is turned on again; with AllowUnsafe the store works on and warns once.
func TestRedisStoreChecksTheServerContinuously(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := redisOn(t, `save "3600 1"`) // RDB snapshots: persistence that CONFIG SET turns off and on without a fork
	now := time.Unix(1_800_000_000, 0)
	var logged bytes.Buffer
	open := func(allow bool) *RedisStore {
		s, err := OpenRedisStore(ctx, rdb, RedisConfig{KeyPrefix: "t:" + strings.Repeat("u", btoi(allow)) + ":", AllowUnsafe: allow,
			CheckInterval: time.Minute, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.now = func() time.Time { return now }
		return s
	}
	strict, lax := open(false), open(true)
	claim := func(s *RedisStore, key string) error { _, err := s.Claim(ctx, key, "tok", time.Minute); return err }
	if err := claim(strict, "SN-1"); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "save", "").Err(); err != nil {
		t.Fatal(err)
	}
	if err := claim(strict, "SN-2"); err != nil {
		t.Fatalf("within the check interval: %v", err)
	}
	now = now.Add(time.Minute)
	if err := claim(strict, "SN-3"); !errors.Is(err, ErrUnsafeRedis) || !strings.Contains(err.Error(), "appendonly") {
		t.Fatalf("a minute after persistence was turned off: %v; want ErrUnsafeRedis naming appendonly and save", err)
	}
	for _, k := range []string{"SN-4", "SN-5"} {
		if err := claim(lax, k); err != nil {
			t.Fatalf("AllowUnsafe: %v", err)
		}
		now = now.Add(time.Minute)
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 1 {
		t.Fatalf("AllowUnsafe logged %d warnings for one unchanged risk, want 1:\n%s", n, logged.String())
	}
	if err := rdb.ConfigSet(ctx, "save", "3600 1").Err(); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Minute)
	if err := claim(strict, "SN-6"); err != nil {
		t.Fatalf("after persistence came back: %v", err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
