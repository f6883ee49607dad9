// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultClaimTTL bounds how long a claim survives its consumer. It must exceed the
	// longest handler run (a handler outliving it lets a redelivery run the effect again),
	// and it is how long a crashed consumer's message waits: RocketMQ's retry schedule
	// (10s, 30s, 1m, 2m, 3m, ...) reaches 5 minutes by the fifth retry, well within its 16
	// retries before the dead-letter queue.
	DefaultClaimTTL = 5 * time.Minute
	// DefaultRetention is how long a consumed key is remembered. Duplicates come from broker
	// redelivery (hours at most: 16 retries span about 4h46m), a relay republishing after a
	// lost ack (minutes to hours) and operators replaying a topic after an incident; 72 hours
	// covers an incident over a weekend. A duplicate arriving later is applied again.
	DefaultRetention = 72 * time.Hour
)

// Config configures a Guard.
type Config struct {
	// Group names the consumer group the keys belong to; it is put before every key, so that
	// two consumer groups applying the same order each apply it once. Required.
	Group string
	// ClaimTTL is how long a claim lasts before another consumer may take the message over.
	// Defaults to DefaultClaimTTL (5 minutes); see there for how to choose it.
	ClaimTTL time.Duration
	// Retention is how long a consumed key is remembered, and so the window in which a
	// duplicate is recognised. Defaults to DefaultRetention (72 hours).
	Retention time.Duration
}

func (c *Config) setDefaults() {
	if c.ClaimTTL == 0 {
		c.ClaimTTL = DefaultClaimTTL
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
}

func (c *Config) validate() error {
	switch {
	case c.Group == "":
		return errors.New("idempotency: Config.Group is required")
	case strings.ContainsAny(c.Group, ": \t\r\n"):
		return fmt.Errorf("idempotency: Config.Group must not contain ':' or white space, got %q", c.Group)
	case c.ClaimTTL < time.Millisecond:
		return fmt.Errorf("idempotency: Config.ClaimTTL must be at least 1ms, got %s", c.ClaimTTL)
	case c.Retention < time.Millisecond:
		return fmt.Errorf("idempotency: Config.Retention must be at least 1ms, got %s", c.Retention)
	}
	return nil
}

// Guard runs a message's effect at most once per key while the key is remembered, with the
// state kept in a Store (Redis, typically) outside the business database. It is safe for
// concurrent use. For an effect on a SQL database, SQLGuard is stronger: it keeps the key in
// the effect's own transaction.
type Guard struct {
	store Store
	cfg   Config
}

// NewGuard returns a Guard on store. Zero fields of cfg take their documented defaults; an
// invalid field is reported by name.
func NewGuard(store Store, cfg Config) (*Guard, error) {
	if store == nil {
		return nil, errors.New("idempotency: NewGuard: nil Store")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Guard{store: store, cfg: cfg}, nil
}

// Do runs fn unless key has already been consumed or is being consumed by someone else.
//
// It claims key for the claim TTL; if the claim succeeds it runs fn, then marks the key
// consumed (fn returned nil: Applied) or releases it so that a redelivery can run fn again
// (fn returned an error: Failed, with that error). A consumed key gives Duplicate with a
// nil error, a key held by another consumer InProgress with ErrInProgress, both without
// calling fn. A store error before fn runs gives Failed.
//
// The error is nil exactly when the message must not be redelivered. If fn succeeds but
// the key cannot be marked consumed, Do returns Applied, a nil error and the reason in
// Result.NotRecorded: the effect happened and must not be retried. ErrClaimLost there
// means fn ran longer than the claim TTL and another consumer may have run it too; raise
// Config.ClaimTTL.
//
// The marking and releasing after fn ignore the cancellation of ctx (they keep its values),
// so that a consumer shutting down still records what it did. If fn panics the claim is
// released and the panic goes on.
func (g *Guard) Do(ctx context.Context, key string, fn func(ctx context.Context) error) (Result, error) {
	return g.DoWithFingerprint(ctx, key, "", fn)
}

// Group returns the consumer group of the guard's keys (Config.Group).
func (g *Guard) Group() string { return g.cfg.Group }

// DoWithFingerprint is Do that also remembers fingerprint (a digest of the message's body)
// with a consumed key, when the Store is a Fingerprinter, and on a Duplicate returns the
// first delivery's in Result.FirstFingerprint: a distinct event sharing the identity of an
// earlier one can then be told from a redelivery. An empty fingerprint is Do.
func (g *Guard) DoWithFingerprint(ctx context.Context, key, fingerprint string, fn func(ctx context.Context) error) (Result, error) {
	if key == "" {
		return Result{Outcome: Failed}, ErrNoKey
	}
	storeKey := g.cfg.Group + ":" + key
	token, err := newToken()
	if err != nil {
		return Result{Outcome: Failed}, err
	}
	res, err := g.store.Claim(ctx, storeKey, token, g.cfg.ClaimTTL)
	if err != nil {
		return Result{Outcome: Failed}, err
	}
	fp, _ := g.store.(Fingerprinter)
	switch res {
	case ClaimConsumed:
		r := Result{Outcome: Duplicate}
		if fp != nil && fingerprint != "" {
			r.FirstFingerprint, _ = fp.Fingerprint(ctx, storeKey) // best effort: a hint for logs
		}
		return r, nil
	case ClaimHeld:
		return Result{Outcome: InProgress}, ErrInProgress
	case ClaimAcquired:
	default:
		return Result{Outcome: Failed}, fmt.Errorf("idempotency: store returned unknown claim result %d for %q", int(res), key)
	}

	after := context.WithoutCancel(ctx)
	finished := false
	defer func() {
		if !finished {
			// fn panicked: free the key so that a redelivery need not wait for the TTL.
			_ = g.store.Release(after, storeKey, token)
		}
	}()
	fnErr := fn(ctx)
	finished = true
	if fnErr != nil {
		if err := g.store.Release(after, storeKey, token); err != nil {
			return Result{Outcome: Failed}, fmt.Errorf("idempotency: handler for %q: %w (and releasing the claim: %w)", key, fnErr, err)
		}
		return Result{Outcome: Failed}, fmt.Errorf("idempotency: handler for %q: %w", key, fnErr)
	}
	if err := g.store.Finish(after, storeKey, token, g.cfg.Retention); err != nil {
		return Result{Outcome: Applied, NotRecorded: fmt.Errorf("idempotency: %q applied but not recorded: %w", key, err)}, nil
	}
	if fp != nil && fingerprint != "" {
		_ = fp.SetFingerprint(after, storeKey, fingerprint, g.cfg.Retention) // best effort: a hint for logs
	}
	return Result{Outcome: Applied}, nil
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("idempotency: make claim token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
