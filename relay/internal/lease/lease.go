// SPDX-License-Identifier: Apache-2.0

// Package lease is a table's (or partition's) Redis lock and the fence of its layout of
// partitions: Take, Extend, Valid and Release, nothing else. The relay's leader loop decides
// when to call them; this package decides only what each does to Redis and for how long the
// lock is certainly ours.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// ErrFence wraps the error of Redis when the layout fence could not be read or set: the
// lock was not tried.
var ErrFence = errors.New("layout fence")

// errNotExtended is Extend's error when the extension was refused without an error: not
// taken for a lost lock (Lost), it is tried again while the lock is valid.
var errNotExtended = errors.New("lock extension not acknowledged")

// ErrNotHeld is Release's error when the lock was no longer ours to release.
var ErrNotHeld = errors.New("lock not held")

// Config is what a Lease needs: where the lock lives, its key and TTL, and the layout it
// fences.
type Config struct {
	// Client holds the lock and the layout key.
	Client redis.UniversalClient
	// Clients, when not empty, are independent masters holding the lock as a Redlock
	// quorum instead of Client (the layout key stays on Client).
	Clients []redis.UniversalClient
	// Key is the lock's key; LayoutKey the key fencing the layout of partitions.
	Key, LayoutKey string
	// Partitions is this relay's number of partitions, the layout it claims.
	Partitions int
	// TTL is the lock's expiry, and the layout key's.
	TTL time.Duration
}

// Lease is one relay's hold on a table's lock. Its methods may be called from several
// goroutines; Valid is cheap.
type Lease struct {
	cfg        Config
	mutex      *redsync.Mutex
	epoch      time.Time    // monotonic base of validUntil
	validUntil atomic.Int64 // the lock's validity, nanoseconds after epoch
}

// New returns the lease of cfg, not yet taken.
func New(cfg Config) *Lease {
	return &Lease{cfg: cfg, mutex: newMutex(cfg), epoch: time.Now()}
}

// lockDrift is taken off the lock's TTL when computing how long it is certainly ours:
// clock drift between us and Redis, and the time an extension's answer took to arrive.
func lockDrift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// newMutex returns the lock of key: on the Redis client the relay was built with, or, when
// LockClients lists several independent masters, a Redlock quorum over them.
func newMutex(cfg Config) *redsync.Mutex {
	var pools []redsyncredis.Pool
	if len(cfg.Clients) > 0 {
		for _, c := range cfg.Clients {
			pools = append(pools, goredis.NewPool(c))
		}
	} else {
		pools = append(pools, goredis.NewPool(cfg.Client))
	}
	return redsync.New(pools...).NewMutex(cfg.Key,
		redsync.WithExpiry(cfg.TTL),
		redsync.WithTries(1),
		redsync.WithSetNXOnExtend(), // an expired lock may be re-taken by its owner if free
		redsync.WithGenValueFunc(lockValue),
	)
}

// lockValue is the value stored in the table's lock: who holds it and since when, for
// operators (redis-cli GET, the dashboard), and a random token that keeps it unique, since
// redsync extends and releases a lock only while it still holds the value it set. Format:
// "host=<hostname> pid=<pid> since=<epoch ms> token=<32 hex digits>".
func lockValue() (string, error) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("host=%s pid=%d since=%d token=%s", host, os.Getpid(), time.Now().UnixMilli(), hex.EncodeToString(b)), nil
}

// Take claims the layout, then tries the lock once, and sets the fence again after it so
// that the fence outlives the lock's validity. It returns the number of partitions of the
// relays holding the layout when it is not ours (the lock not tried), or an error: the
// fence's wrapped in ErrFence, else the lock's (Busy tells a held lock from Redis failing).
func (l *Lease) Take(ctx context.Context) (other int, err error) {
	start := time.Now()
	other, err = l.claimLayout(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrFence, err)
	}
	if other != 0 {
		return other, nil
	}
	actx, cancel := context.WithTimeout(ctx, l.cfg.TTL/2)
	err = l.mutex.TryLockContext(actx)
	cancel()
	if err != nil {
		return 0, err
	}
	// Set the fence again after the lock, so that it outlives the lock's validity.
	_, _ = l.claimLayout(ctx)
	l.setValidity(start)
	return 0, nil
}

// Extend extends the lock for another TTL and then the layout fence. It returns the error
// of the extension (Lost tells a lock taken from Redis not answering), or, with a nil
// error, the number of partitions of relays that claimed the layout meanwhile (0 when it is
// still ours or the fence could not be read). When ctx is done by the time the extension
// answers it returns ctx's error and records nothing.
func (l *Lease) Extend(ctx context.Context) (other int, err error) {
	start := time.Now()
	ectx, c := context.WithTimeout(ctx, l.cfg.TTL/4)
	ok, err := l.mutex.ExtendContext(ectx)
	c()
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if !ok || err != nil {
		if err == nil {
			err = errNotExtended
		}
		return 0, err
	}
	l.setValidity(start)
	if other, ferr := l.claimLayout(ctx); ferr == nil && other != 0 {
		return other, nil
	}
	return 0, nil
}

// Valid reports whether the lock is still certainly ours. The clock is monotonic, so a
// process frozen past the TTL finds it false as soon as it runs again. A nil Lease is never
// valid.
func (l *Lease) Valid() bool {
	if l == nil {
		return false
	}
	return int64(time.Since(l.epoch)) < l.validUntil.Load()
}

// Release gives the lock up; ErrNotHeld when it was no longer ours.
func (l *Lease) Release(ctx context.Context) error {
	ok, err := l.mutex.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotHeld
	}
	return nil
}

// setValidity records that the lock is ours until TTL after start, the moment the
// acquisition or extension that succeeded was sent.
func (l *Lease) setValidity(start time.Time) {
	until := start.Add(l.cfg.TTL - lockDrift(l.cfg.TTL))
	l.validUntil.Store(int64(until.Sub(l.epoch)))
}

// Busy reports whether Take failed because another relay holds the lock, as opposed to
// Redis not answering.
func Busy(err error) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed)
}

// Lost reports whether an extension failed because the lock is no longer ours, as opposed
// to Redis not answering.
func Lost(err error) bool {
	var taken *redsync.ErrTaken
	return errors.Is(err, redsync.ErrExtendFailed) || errors.Is(err, redsync.ErrLockAlreadyExpired) || errors.As(err, &taken)
}
