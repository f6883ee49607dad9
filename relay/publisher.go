package relay

import (
	"context"
	"errors"
)

// Message is one outbox row as the relay publishes it.
type Message struct {
	// ID is the row's primary key.
	ID int64
	// MsgID is the producer-chosen unique id; it travels as the OUTBOX_MSG_ID property.
	MsgID string
	Topic string
	Tag   string
	// Keys are the RocketMQ keys: the msg_keys column split on spaces, else MsgID.
	Keys []string
	// ShardingKey chooses the queue by hash; empty lets the publisher choose.
	ShardingKey string
	// Body is the content column, byte for byte.
	Body []byte
	// Properties are the user properties from the properties column.
	Properties map[string]string
	// RetryCount is the number of failed attempts so far.
	RetryCount int
	// MaxRetries is the max_retry_count column.
	MaxRetries int
}

// Publisher sends messages to the broker.
//
// Send publishes msgs, which all have the same topic, and returns nil only when the broker
// acknowledged every one of them: the relay then marks them sent. With several messages it
// should use one request (a RocketMQ batch, stored all or nothing); an error means none
// of them counts as delivered, and the relay retries them one by one to find which failed.
// A nil error is the only acknowledgement: a lost reply is an error, and the re-send that
// follows may duplicate the message, which consumers dedupe. Send must honour ctx: once it
// is done, return promptly. It is called from many goroutines at once.
//
// Send marks what its errors mean, and the relay acts on the marks (docs/decisions.md,
// "Failure accounting"):
//   - Permanent: the message can never be sent as it is; it goes dead at once.
//   - Refused: the broker read the request and refused this message; the attempt counts
//     against max_retry_count, and a refused batch is retried one message at a time so that
//     one bad message cannot fail its neighbours.
//   - ErrTopicNotFound wrapped: the name servers answered that the topic has no route; the
//     attempt counts (it is the topic's problem, not an outage).
//   - ErrBrokerUnreachable wrapped: nothing reached a broker (connection refused, no route to
//     it, name servers down); the attempt never counts, the row waits out the broker's backoff.
//   - anything else (a timeout, a dropped or reset connection, the broker busy): a transient
//     failure. It counts only when it singles the message out: when it is the only transient
//     failure of its broker within the incident window. Failures that come together are an
//     incident of the broker and count for none of their messages.
//
// AtBroker attributes an error to the broker address it came from, so that incidents are
// judged per broker.
type Publisher interface {
	Send(ctx context.Context, route Route, msgs ...*Message) error
	// Close releases the publisher's connections; Send must not be called after it.
	Close() error
}

// PermanentError marks a failure that no retry can cure (an invalid topic, a body the broker
// refuses): the relay marks the message dead at once with the error as its reason.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the relay does not retry it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// ErrBrokerUnreachable marks, wrapped by a Publisher, a send that could not reach a broker at
// all (connection refused, no route to it, no name server answering), so the message was
// certainly not stored. Its row keeps its retry count and waits out the broker's backoff:
// an outage is not the message's fault, and counting it would park every due row as dead
// during a broker restart.
var ErrBrokerUnreachable = errors.New("broker unreachable")

// ErrTopicNotFound marks, wrapped by a Publisher, a send whose topic has no route although
// the name servers answered: a misspelt topic, or one not created on a cluster with
// autoCreateTopicEnable=false. The attempt counts, so such rows end dead with the reason after
// their retries instead of waiting forever; the other rows of the table are not held up.
var ErrTopicNotFound = errors.New("topic has no route on the name servers")

// BrokerError attributes a send's error to the broker it was sent to.
type BrokerError struct {
	// Broker is the broker's address (host:port).
	Broker string
	// Err is the send's error.
	Err error
}

func (e *BrokerError) Error() string { return e.Err.Error() + " (broker " + e.Broker + ")" }

// Unwrap returns the send's error.
func (e *BrokerError) Unwrap() error { return e.Err }

// AtBroker attributes err to the broker at addr; it returns err itself when either is empty.
func AtBroker(addr string, err error) error {
	if err == nil || addr == "" {
		return err
	}
	return &BrokerError{Broker: addr, Err: err}
}

// BrokerOf returns the broker address err is attributed to, or "" when none is.
func BrokerOf(err error) string {
	var b *BrokerError
	if errors.As(err, &b) {
		return b.Broker
	}
	return ""
}

// RefusedError marks an answer of the broker refusing a send: it read the request, so when a
// batch is refused one message of it may be at fault.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }

// Unwrap returns the broker's answer.
func (e *RefusedError) Unwrap() error { return e.Err }

// Refused wraps the broker's refusal err.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return &RefusedError{Err: err}
}

// IsRefused reports whether err, or an error it wraps, is a *RefusedError.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// IsPermanent reports whether err, or an error it wraps, is a *PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
