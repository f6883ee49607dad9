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
// is done, return promptly. It is called from many goroutines at once. An error wrapped with
// Permanent marks the messages dead at once instead of retrying them.
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

// IsPermanent reports whether err, or an error it wraps, is a *PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
