// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrUnsafeRedis is wrapped by CheckRedis's and OpenRedisStore's errors when the Redis server
// may forget consumed keys, after which a redelivered message is applied a second time.
var ErrUnsafeRedis = errors.New("idempotency: this Redis may forget consumed messages")

// RedisServer is what CheckRedis read of a Redis server's settings.
type RedisServer struct {
	// MaxmemoryPolicy is maxmemory-policy (INFO memory).
	MaxmemoryPolicy string
	// Maxmemory is maxmemory in bytes; 0 means no limit, so nothing is ever evicted.
	Maxmemory int64
	// AOF is whether the append-only file is on (INFO persistence).
	AOF bool
	// Save is the RDB snapshot schedule (CONFIG GET save): "" for none, "unknown" when the
	// server does not allow CONFIG (managed services often do not).
	Save string
	// Replicas is the number of connected replicas (INFO replication).
	Replicas int
}

// Risks lists, in words, each setting under which the server may forget a consumed key.
// Replication is asynchronous whatever the settings (a failover can lose the last writes);
// that risk is in the docs, not in Risks, since no setting removes it.
func (s RedisServer) Risks() []string {
	var out []string
	if s.Maxmemory > 0 && s.MaxmemoryPolicy != "noeviction" {
		out = append(out, fmt.Sprintf("maxmemory-policy is %s with maxmemory %d: every consumed key has a TTL, so the server evicts them "+
			"when memory runs short (set maxmemory-policy noeviction, or maxmemory 0)", s.MaxmemoryPolicy, s.Maxmemory))
	}
	switch {
	case !s.AOF && s.Save == "":
		out = append(out, "neither appendonly nor RDB snapshots (save) are on: a restart forgets every consumed key (set appendonly yes)")
	case !s.AOF && s.Save == "unknown":
		out = append(out, "appendonly is off and the server refuses CONFIG GET save, so whether RDB snapshots are on cannot be read: "+
			"a restart may forget every consumed key (set appendonly yes, or RedisConfig.AllowUnsafe if snapshots are known to be on)")
	}
	return out
}

// CheckRedis reads the eviction and persistence settings of the Redis server behind rdb
// (INFO, and CONFIG GET save where the server allows it) and returns an error wrapping
// ErrUnsafeRedis naming every risk of RedisServer.Risks. With a Cluster client it reads one
// node: check each primary when their settings differ.
func CheckRedis(ctx context.Context, rdb redis.Cmdable) (RedisServer, error) {
	var s RedisServer
	info, err := rdb.Info(ctx, "memory", "persistence", "replication").Result()
	if err != nil {
		return s, fmt.Errorf("idempotency: read the Redis server's settings (INFO): %w", err)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	s.MaxmemoryPolicy = fields["maxmemory_policy"]
	s.Maxmemory, _ = strconv.ParseInt(fields["maxmemory"], 10, 64)
	s.AOF = fields["aof_enabled"] == "1"
	s.Replicas, _ = strconv.Atoi(fields["connected_slaves"])
	if save, err := rdb.ConfigGet(ctx, "save").Result(); err != nil {
		s.Save = "unknown"
	} else {
		s.Save = strings.TrimSpace(save["save"])
	}
	if risks := s.Risks(); len(risks) > 0 {
		return s, fmt.Errorf("%w: %s", ErrUnsafeRedis, strings.Join(risks, "; "))
	}
	return s, nil
}

// RedisClient is what OpenRedisStore needs of a client: scripts for the store, INFO and
// CONFIG for the check. *redis.Client, *redis.ClusterClient and redis.UniversalClient have it.
type RedisClient interface {
	redis.Scripter
	redis.Cmdable
}

// OpenRedisStore is NewRedisStore that reads the server's settings at once: it refuses a
// server that may forget consumed keys (eviction, no persistence, settings it cannot read)
// with an error wrapping ErrUnsafeRedis, unless cfg.AllowUnsafe is set, in which case it logs
// the risks at warn level on cfg.Logger and opens the store. The store goes on checking every
// cfg.CheckInterval. Use it at a consumer's start; for money, prefer SQLGuard, whose keys live
// in the business database's transaction.
func OpenRedisStore(ctx context.Context, rdb RedisClient, cfg RedisConfig) (*RedisStore, error) {
	if rdb == nil {
		return nil, errors.New("idempotency: OpenRedisStore: nil Redis client")
	}
	store, err := NewRedisStore(rdb, cfg)
	if err != nil {
		return nil, err
	}
	if err := store.guarantee(ctx); err != nil {
		return nil, err
	}
	return store, nil
}
