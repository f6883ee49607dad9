// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultRedisKeyPrefix is the prefix of every key RedisStore writes, unless configured.
const DefaultRedisKeyPrefix = "idempotency:"

// Values stored under a key. A claim is "consuming:<token>", a finished key "consumed".
const (
	redisConsumingPrefix = "consuming:"
	redisConsumed        = "consumed"
)

// claimScript is SET key consuming:<token> NX PX ttl, and on failure tells a consumed key
// from a held one in the same atomic step (a separate GET could find the key gone).
var claimScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
if redis.call('GET', KEYS[1]) == 'consumed' then
  return 2
end
return 3
`)

// finishScript sets the key to consumed only if the caller's claim is still there.
var finishScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], 'consumed', 'PX', ARGV[2])
  return 1
end
return 0
`)

// releaseScript deletes the key only if the caller's claim is still there.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
`)

// RedisConfig configures a RedisStore.
type RedisConfig struct {
	// KeyPrefix is put before every key, to keep the store's keys apart from others in the
	// same Redis database. Defaults to DefaultRedisKeyPrefix ("idempotency:").
	KeyPrefix string
	// AllowUnsafe lets the store work on a server that may forget consumed keys (see
	// CheckRedis), logging the risks at warn level instead of refusing. Defaults to false.
	AllowUnsafe bool
	// Logger receives the warnings of AllowUnsafe. Defaults to slog.Default().
	Logger *slog.Logger
	// CheckInterval is how often the store reads the server's settings again: a server whose
	// persistence is turned off, or a failover to a replica configured differently, is found
	// within it. Defaults to DefaultRedisCheckInterval.
	CheckInterval time.Duration
}

// DefaultRedisCheckInterval is RedisConfig.CheckInterval's default.
const DefaultRedisCheckInterval = time.Minute

// RedisStore is a Store in Redis: a claim is SET key consuming:<token> NX PX ttl, and
// Finish and Release are compare-and-set Lua scripts on the token. Each call is one round
// trip. Keys live in one hash slot each, so it works with Redis Cluster too.
//
// Memory: about 100 bytes per consumed key, kept for the retention TTL; at 1,000 messages
// a second and 72 hours of retention that is roughly 26 GB, so size the retention to the
// traffic (or use SQLGuard, whose rows live on disk).
type RedisStore struct {
	rdb    redis.Scripter
	prefix string
	cfg    RedisConfig
	now    func() time.Time

	mu        sync.Mutex
	checkedAt time.Time // when the server's settings were last read
	refusal   error     // non-nil while the server may forget keys and AllowUnsafe is off
	warned    string    // the risks last logged under AllowUnsafe
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a Store on rdb, which can be a *redis.Client, *redis.ClusterClient or
// anything else that runs scripts and INFO. The store reads the server's settings
// (CheckRedis) before its first claim and every CheckInterval after, and while the server may
// evict or lose consumed keys its claims fail with an error wrapping ErrUnsafeRedis (the
// message is redelivered later, never applied on a store that may forget it), unless
// cfg.AllowUnsafe is set. A client that cannot run INFO counts as such a server.
func NewRedisStore(rdb redis.Scripter, cfg RedisConfig) (*RedisStore, error) {
	if rdb == nil {
		return nil, errors.New("idempotency: NewRedisStore: nil Redis client")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultRedisKeyPrefix
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultRedisCheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &RedisStore{rdb: rdb, prefix: cfg.KeyPrefix, cfg: cfg, now: time.Now}, nil
}

// guarantee returns nil when the server keeps consumed keys (or AllowUnsafe is set), reading
// its settings again when the last reading is older than CheckInterval. A failed reading is
// returned as it is and tried again on the next call.
func (s *RedisStore) guarantee(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.checkedAt.IsZero() && s.now().Sub(s.checkedAt) < s.cfg.CheckInterval {
		return s.refusal
	}
	var srv RedisServer
	var err error
	if c, ok := s.rdb.(redis.Cmdable); ok {
		srv, err = CheckRedis(ctx, c)
	} else {
		err = fmt.Errorf("%w: the client cannot read the server's settings (INFO); pass a *redis.Client or set RedisConfig.AllowUnsafe", ErrUnsafeRedis)
	}
	if err != nil && !errors.Is(err, ErrUnsafeRedis) {
		return err
	}
	s.checkedAt, s.refusal = s.now(), nil
	switch {
	case err == nil:
		s.warned = ""
	case !s.cfg.AllowUnsafe:
		s.refusal = err
	case err.Error() != s.warned:
		s.warned = err.Error()
		s.cfg.Logger.WarnContext(ctx, "idempotency: this Redis may forget consumed messages, which are then applied twice (RedisConfig.AllowUnsafe is set)",
			slog.String("risks", err.Error()), slog.Int("replicas", srv.Replicas))
	}
	return s.refusal
}

// Key returns the Redis key under which key is stored, for inspection and tests.
func (s *RedisStore) Key(key string) string { return s.prefix + key }

// Claim implements Store.
func (s *RedisStore) Claim(ctx context.Context, key, token string, ttl time.Duration) (ClaimResult, error) {
	if err := s.guarantee(ctx); err != nil {
		return 0, fmt.Errorf("idempotency: claim %q in redis: %w", key, err)
	}
	n, err := claimScript.Run(ctx, s.rdb, []string{s.prefix + key}, redisConsumingPrefix+token, ttl.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("idempotency: claim %q in redis: %w", key, err)
	}
	switch n {
	case 1:
		return ClaimAcquired, nil
	case 2:
		return ClaimConsumed, nil
	case 3:
		return ClaimHeld, nil
	}
	return 0, fmt.Errorf("idempotency: claim %q in redis: unexpected script result %d", key, n)
}

// Finish implements Store.
func (s *RedisStore) Finish(ctx context.Context, key, token string, retention time.Duration) error {
	n, err := finishScript.Run(ctx, s.rdb, []string{s.prefix + key}, redisConsumingPrefix+token, retention.Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("idempotency: mark %q consumed in redis: %w", key, err)
	}
	if n != 1 {
		return fmt.Errorf("idempotency: mark %q consumed: %w", key, ErrClaimLost)
	}
	return nil
}

// Release implements Store.
func (s *RedisStore) Release(ctx context.Context, key, token string) error {
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.prefix + key}, redisConsumingPrefix+token).Int()
	if err != nil {
		return fmt.Errorf("idempotency: release %q in redis: %w", key, err)
	}
	if n != 1 {
		return fmt.Errorf("idempotency: release %q: %w", key, ErrClaimLost)
	}
	return nil
}

// fingerprintKey is where key's fingerprint is kept: a space after the prefix, which no
// group (and so no key of Guard's) can hold, keeps the two apart.
func (s *RedisStore) fingerprintKey(key string) string { return s.prefix + "fp " + key }

var _ Fingerprinter = (*RedisStore)(nil)

// SetFingerprint implements Fingerprinter.
func (s *RedisStore) SetFingerprint(ctx context.Context, key, fingerprint string, retention time.Duration) error {
	c, ok := s.rdb.(redis.StringCmdable)
	if !ok {
		return nil
	}
	if err := c.Set(ctx, s.fingerprintKey(key), fingerprint, retention).Err(); err != nil {
		return fmt.Errorf("idempotency: keep the fingerprint of %q in redis: %w", key, err)
	}
	return nil
}

// Fingerprint implements Fingerprinter.
func (s *RedisStore) Fingerprint(ctx context.Context, key string) (string, error) {
	c, ok := s.rdb.(redis.StringCmdable)
	if !ok {
		return "", nil
	}
	v, err := c.Get(ctx, s.fingerprintKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("idempotency: read the fingerprint of %q in redis: %w", key, err)
	}
	return v, nil
}
