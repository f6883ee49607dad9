// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"errors"
	"fmt"
)

// Outcome is what happened to one delivery of a message.
type Outcome int

const (
	// Failed means the effect was not applied: the handler or the store returned an error,
	// which Do returns. Nothing is recorded, so a redelivery will apply the effect. It is
	// the zero value, so an Outcome left unset never reads as a success.
	Failed Outcome = iota
	// Applied means the handler ran and returned nil: acknowledge. Do's error is then always
	// nil; a failure to record the key afterwards is reported in Result.NotRecorded.
	Applied
	// Duplicate means the key had already been consumed: acknowledge the message and skip it.
	Duplicate
	// InProgress means another consumer holds the key right now: ask the broker to redeliver
	// the message later (Do returns ErrInProgress). If that consumer fails, the redelivery
	// applies the effect; if it succeeds, the redelivery is a Duplicate.
	InProgress
)

// Result is what Do did with one delivery. Do's error is non-nil exactly when the message
// must be redelivered (Outcome Failed or InProgress), so the usual
//
//	if err != nil { return retryLater }
//
// is right; Outcome says more for logs and metrics.
type Result struct {
	// Outcome is what happened to the delivery.
	Outcome Outcome
	// NotRecorded is set when the effect was applied (Outcome Applied) but the key could
	// not be marked consumed afterwards, for example ErrClaimLost when the handler outlived
	// the claim TTL, or Redis being unreachable. The effect has happened: acknowledge the
	// message, and report NotRecorded to the operator, since a later duplicate may be
	// applied again. Only Guard sets it; SQLGuard records the key in the effect's own
	// transaction.
	NotRecorded error
	// FirstFingerprint is, for a Duplicate, the fingerprint the first delivery of the key was
	// applied with (Guard.DoWithFingerprint on a Store that is a Fingerprinter); empty when
	// unknown. A different one means a distinct event shares the identity and was skipped.
	FirstFingerprint string
}

// String returns the outcome's name in lower case, for logs and metrics labels.
func (o Outcome) String() string {
	switch o {
	case Failed:
		return "failed"
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case InProgress:
		return "in_progress"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Ack reports whether a message with this outcome should be acknowledged to the broker:
// true for Applied and Duplicate, false for Failed and InProgress (redeliver later).
func (o Outcome) Ack() bool { return o == Applied || o == Duplicate }

var (
	// ErrInProgress is returned by Guard.Do with Outcome InProgress: another consumer holds
	// the key; redeliver the message later.
	ErrInProgress = errors.New("idempotency: message in progress in another consumer")

	// ErrClaimLost is returned by a Store (and wrapped by Guard.Do) when a consumer tries to
	// finish or release a claim that is no longer its own: the claim expired and the key was
	// claimed again, or consumed, by someone else. The key is left untouched. Seeing it after
	// a successful handler means the claim TTL is shorter than the handler's run time.
	ErrClaimLost = errors.New("idempotency: claim lost (expired and taken over by another consumer)")

	// ErrNoKey is returned when a message has no idempotency key (an empty key, or no keys,
	// property or JSON field in the message). Such a message is never applied under a
	// made-up key; see rocketmqmw.MissingKeyPolicy.
	ErrNoKey = errors.New("idempotency: message has no idempotency key")

	// ErrInvalidKey is returned for a key a store cannot hold, such as one longer than
	// MaxSQLKeyLen bytes for the SQL store. Redelivery cannot fix it, so the middleware treats
	// it like a missing key.
	ErrInvalidKey = errors.New("idempotency: invalid idempotency key")
)
