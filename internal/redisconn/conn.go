// SPDX-License-Identifier: Apache-2.0

package redisconn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// Options tune the clients beyond the configuration. The zero value keeps go-redis's
// defaults (5 s dial timeout, 3 retries).
type Options struct {
	// DialTimeout bounds each connection attempt. Defaults to go-redis's 5 seconds.
	DialTimeout time.Duration
	// MaxRetries is how often a failed command is retried; -1 disables retries. Defaults to
	// go-redis's 3.
	MaxRetries int
}

// Conn is the relay's connection to Redis. Close it when done.
type Conn struct {
	// Client carries the writers' nudges (SUBSCRIBE) and, when Redlock is empty, the lock.
	Client redis.UniversalClient
	// Redlock holds one client per master of lock.redlock_addrs, in that order; nil when
	// the lock lives on Client.
	Redlock []redis.UniversalClient

	desc string
}

// Open returns the clients described by cfg.Redis and cfg.Lock.RedlockAddrs. cfg must be
// valid (config.Load checks it). Clients connect on first use: call Ping to check them.
func Open(cfg config.Config, o Options) *Conn {
	r := cfg.Redis
	uo := &redis.UniversalOptions{
		Username: r.Username, Password: r.Password, DB: r.DB,
		DialTimeout: o.DialTimeout, MaxRetries: o.MaxRetries,
	}
	switch r.Mode() {
	case "sentinel":
		uo.Addrs, uo.MasterName, uo.SentinelPassword = r.Addrs, r.MasterName, r.SentinelPassword
	case "cluster":
		uo.Addrs, uo.IsClusterMode = r.Addrs, true
	default:
		// One address: NewUniversalClient makes a plain client (two or more would make a
		// Cluster client, which the configuration never infers).
		uo.Addrs = []string{r.Addr}
	}
	c := &Conn{Client: redis.NewUniversalClient(uo), desc: Describe(cfg)}
	for _, addr := range cfg.Lock.RedlockAddrs {
		c.Redlock = append(c.Redlock, redis.NewClient(&redis.Options{
			Addr: addr, Username: r.Username, Password: r.Password, DB: r.DB,
			DialTimeout: o.DialTimeout, MaxRetries: o.MaxRetries,
		}))
	}
	return c
}

// Describe says where cfg's Redis is, for logs, without credentials: the address, the
// Sentinel master and its Sentinels, or the Cluster seeds, and the Redlock masters.
func Describe(cfg config.Config) string {
	r := cfg.Redis
	var desc string
	switch r.Mode() {
	case "sentinel":
		desc = fmt.Sprintf("sentinel master %s via %s", r.MasterName, strings.Join(r.Addrs, ","))
	case "cluster":
		desc = "cluster via " + strings.Join(r.Addrs, ",")
	default:
		desc = r.Addr
	}
	if len(cfg.Lock.RedlockAddrs) > 0 {
		desc += "; lock on a Redlock quorum of " + strings.Join(cfg.Lock.RedlockAddrs, ",")
	}
	return desc
}

// String describes the connection as Describe does.
func (c *Conn) String() string { return c.desc }

// Quorum is how many Redlock masters must agree for the lock to be held: a majority, or 1
// when the lock lives on Client.
func (c *Conn) Quorum() int {
	if len(c.Redlock) == 0 {
		return 1
	}
	return len(c.Redlock)/2 + 1
}

// Ping checks that Client answers and that a quorum of the Redlock masters does: a relay
// may start with a minority of them down, as it may keep leading.
func (c *Conn) Ping(ctx context.Context) error {
	if err := c.Client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis (%s): %w", c.desc, err)
	}
	if len(c.Redlock) == 0 {
		return nil
	}
	var errs []error
	for i, m := range c.Redlock {
		if err := m.Ping(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("lock.redlock_addrs[%d]: %w", i, err))
		}
	}
	if up := len(c.Redlock) - len(errs); up < c.Quorum() {
		return fmt.Errorf("redlock: %d of %d masters answer, %d needed: %w", up, len(c.Redlock), c.Quorum(), errors.Join(errs...))
	}
	return nil
}

// LockReader is the client on which the lock can be read with ops.ReadLock and
// ops.ReadLockHolder: Client, or with Redlock the first master (the holder's value is the
// same on every master of the quorum). ReadLock reads a Redlock lock on every master.
func (c *Conn) LockReader() redis.Cmdable {
	if len(c.Redlock) > 0 {
		return c.Redlock[0]
	}
	return c.Client
}

// ReadLock reads the state of the lock at key where the relay holds it. With Redlock the
// lock is held when a quorum of masters holds it, with the shortest time left among them;
// it is an error when fewer than a quorum of masters answer.
func (c *Conn) ReadLock(ctx context.Context, key string) (ops.LockState, error) {
	if len(c.Redlock) == 0 {
		return ops.ReadLock(ctx, c.Client, key)
	}
	st := ops.LockState{Key: key}
	held, answered := 0, 0
	var errs []error
	for i, m := range c.Redlock {
		s, err := ops.ReadLock(ctx, m, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("lock.redlock_addrs[%d]: %w", i, err))
			continue
		}
		answered++
		if s.Held {
			held++
			if st.TTL == 0 || s.TTL < st.TTL {
				st.TTL, st.TTLMillis = s.TTL, s.TTLMillis
			}
		}
	}
	if answered < c.Quorum() {
		return st, fmt.Errorf("redlock: %d of %d masters answer, %d needed: %w", answered, len(c.Redlock), c.Quorum(), errors.Join(errs...))
	}
	st.Held = held >= c.Quorum()
	if !st.Held {
		st.TTL, st.TTLMillis = 0, 0
	}
	return st, nil
}

// Close closes every client.
func (c *Conn) Close() error {
	errs := []error{c.Client.Close()}
	for _, m := range c.Redlock {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}
