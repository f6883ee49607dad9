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
// Send marks what its errors mean, and the relay acts on the marks: Permanent (dead at once,
// no retry), Refused (the broker answered and refused: in a batch one message may be at fault,
// so the relay sends them one by one), ErrBrokerUnreachable wrapped (the broker could not be
// reached at all and nothing was stored: no retry is spent). An unmarked error (a timeout, a
// dropped connection) is retried and counts as an attempt.
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

// ErrBrokerUnreachable marks, wrapped by a Publisher, a send that could not reach the broker
// at all (connection refused, no route), so the message was certainly not stored. When no
// message of a batch reached the broker, DrainOnce returns it: the batch's rows are left due
// with their retry counts untouched, since an outage is not the messages' fault and counting it
// would park every due row as dead during a broker restart.
var ErrBrokerUnreachable = errors.New("broker unreachable")

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
