package idempotency

import (
	"errors"
	"fmt"
)

// Outcome is what happened to one delivery of a message.
type Outcome int

const (
	// Failed means the effect was not applied: the handler or the store returned an error,
	// which Do returns with it. Nothing is recorded, so a redelivery will apply the effect.
	// It is the zero value, so an Outcome left unset never reads as a success.
	Failed Outcome = iota
	// Applied means the handler ran and returned nil. With a non-nil error (the Redis store
	// could not mark the key consumed, for example ErrClaimLost) the effect has still
	// happened: acknowledge the message and report the error, do not retry it.
	Applied
	// Duplicate means the key had already been consumed: acknowledge the message and skip it.
	Duplicate
	// InProgress means another consumer holds the key right now: ask the broker to redeliver
	// the message later. If that consumer fails, the redelivery applies the effect; if it
	// succeeds, the redelivery is a Duplicate.
	InProgress
)

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
	// ErrClaimLost is returned by a Store (and wrapped by Guard.Do) when a consumer tries to
	// finish or release a claim that is no longer its own: the claim expired and the key was
	// claimed again, or consumed, by someone else. The key is left untouched. Seeing it after
	// a successful handler means the claim TTL is shorter than the handler's run time.
	ErrClaimLost = errors.New("idempotency: claim lost (expired and taken over by another consumer)")

	// ErrNoKey is returned when a message has no idempotency key (empty keys, property or JSON
	// field). Such a message is never applied under a made-up key; see MissingKeyPolicy.
	ErrNoKey = errors.New("idempotency: message has no idempotency key")

	// ErrInvalidKey is returned for a key a store cannot hold, such as one longer than
	// MaxSQLKeyLen bytes for the SQL store. Redelivery cannot fix it, so the middleware treats
	// it like a missing key.
	ErrInvalidKey = errors.New("idempotency: invalid idempotency key")
)
