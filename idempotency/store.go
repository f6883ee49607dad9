// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"context"
	"time"
)

// ClaimResult is the state a Store found a key in when asked to claim it.
type ClaimResult int

const (
	// ClaimAcquired means the key was free (absent, released or expired) and is now held by
	// the caller's token for the claim TTL.
	ClaimAcquired ClaimResult = iota + 1
	// ClaimConsumed means the key has been marked consumed and its retention has not run out.
	ClaimConsumed
	// ClaimHeld means another token holds an unexpired claim on the key.
	ClaimHeld
)

// Store keeps, per key, whether a message is free, being consumed (claimed by a token) or
// consumed. It is shared by every consumer of a group, in every process.
//
// A key moves free → claimed (Claim) → consumed (Finish) or back to free (Release or claim
// expiry); consumed goes back to free when its retention runs out. A token is an opaque
// string unique to one attempt at one message (Guard makes 128 random bits per Do): it is
// how a store tells a consumer's own claim from a later claim on the same key after the
// first one expired. Every method is atomic on its key: its check and its write are one step
// that no other call on the key can interleave with.
//
// Implementations must be safe for concurrent use. A context that is cancelled or times
// out aborts the call with an error; the key is then in an unknown state, which is safe:
// a claim that was made expires after its TTL. An error other than ErrClaimLost says
// nothing about the key's state either.
//
// A Store is a courtesy, not a fence: if a handler outlives its claim TTL, another consumer
// can claim the key and run the effect a second time. The store guarantees that the late
// consumer then gets ErrClaimLost instead of overwriting the other's state, not that the
// effect ran once. For a strict guarantee keep the key in the business database (SQLGuard).
type Store interface {
	// Claim claims key for token for ttl if the key is free, and otherwise reports whether it
	// is consumed or held. Of concurrent claims on a free key exactly one gets ClaimAcquired.
	// Unless finished or released, the claim expires after ttl and the key is free again:
	// that is how the crash of a consumer in the middle of a message is recovered from.
	Claim(ctx context.Context, key, token string, ttl time.Duration) (ClaimResult, error)

	// Finish marks key consumed for retention, if and only if token still holds the claim.
	// Otherwise it returns ErrClaimLost and leaves the key as it is (held by another token,
	// consumed by another, or free).
	Finish(ctx context.Context, key, token string, retention time.Duration) error

	// Release frees key so that a redelivery can claim it at once, if and only if token still
	// holds the claim. Otherwise it returns ErrClaimLost and leaves the key as it is.
	Release(ctx context.Context, key, token string) error
}

// Fingerprinter is a Store that can also keep a fingerprint of the first delivery beside a
// consumed key (Guard.DoWithFingerprint). RedisStore is one. Fingerprints are hints for
// logs and metrics, never part of the decision to apply a message.
type Fingerprinter interface {
	// SetFingerprint keeps fingerprint for key for retention.
	SetFingerprint(ctx context.Context, key, fingerprint string, retention time.Duration) error
	// Fingerprint returns key's fingerprint, or "" when there is none.
	Fingerprint(ctx context.Context, key string) (string, error)
}
