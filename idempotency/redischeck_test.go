// SPDX-License-Identifier: Apache-2.0

package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
)

// TestOpenRedisStoreRefusesARedisThatForgets is issue 23, row 5: managed Redis's default
// volatile-lru evicts consumed keys (each has a TTL) and a server without persistence
// forgets them on restart; either way a redelivery is applied twice. OpenRedisStore refuses
// such a server, naming the settings, or with AllowUnsafe opens it and warns; it opens a
// server with noeviction and the append-only file.
func TestOpenRedisStoreRefusesARedisThatForgets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	open := func(lines ...string) *redis.Client {
		p := redistest.Server(t, lines...)
		rdb := redis.NewClient(&redis.Options{Addr: p.Addr})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	evicting := open("maxmemory 64mb", "maxmemory-policy volatile-lru") // no persistence either
	_, err := idempotency.OpenRedisStore(ctx, evicting, idempotency.RedisConfig{})
	if !errors.Is(err, idempotency.ErrUnsafeRedis) || !strings.Contains(err.Error(), "volatile-lru") || !strings.Contains(err.Error(), "appendonly") {
		t.Fatalf("OpenRedisStore on volatile-lru without persistence = %v; want ErrUnsafeRedis naming both", err)
	}
	var logged bytes.Buffer
	store, err := idempotency.OpenRedisStore(ctx, evicting, idempotency.RedisConfig{AllowUnsafe: true, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil || store == nil || !strings.Contains(logged.String(), "level=WARN") || !strings.Contains(logged.String(), "volatile-lru") {
		t.Fatalf("with AllowUnsafe: %v; logged %q", err, logged.String())
	}
	safe := open("appendonly yes", "maxmemory 64mb", "maxmemory-policy noeviction")
	if _, err := idempotency.OpenRedisStore(ctx, safe, idempotency.RedisConfig{}); err != nil {
		t.Fatalf("OpenRedisStore on noeviction with AOF: %v", err)
	}
	srv, err := idempotency.CheckRedis(ctx, safe)
	if err != nil || !srv.AOF || srv.MaxmemoryPolicy != "noeviction" {
		t.Fatalf("CheckRedis = %+v, %v", srv, err)
	}
}
