// SPDX-License-Identifier: Apache-2.0

package message

import (
	"context"
	"errors"
	"fmt"
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
	// Stored is set by the publisher on an acknowledged send: where the broker stored the
	// message (nil when the publisher cannot tell). The relay records it with the sent row.
	Stored *Stored
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
// Send says what its errors mean with a *SendError (see SendErrorKind); any other error is
// transient. The relay acts on KindOf(err) alone (docs/decisions.md, "Failure accounting").
// SendError.Broker attributes an error to the broker address it came from, so that
// incidents are judged per broker. The older marks (Permanent, Refused, ErrTopicNotFound,
// ErrBrokerUnreachable, AtBroker) are deprecated but still read.
type Publisher interface {
	Send(ctx context.Context, route Route, msgs ...*Message) error
	// Close releases the publisher's connections; Send must not be called after it.
	Close() error
}

// KeyBatcher is implemented by a Publisher that can send the messages of several sharding
// keys in one batch request when their keys go to the same queue: a batch is stored in one
// queue in its order, so each key keeps its queue and, on an ordered route, its order.
// The RocketMQ adapter (package relay/rocketmq) implements it.
type KeyBatcher interface {
	// QueueOf names the queue that messages of topic with shardingKey go to, or returns
	// false when it cannot tell (the topic's route not yet known), or will not (its broker
	// refused a batch of keyed messages lately): the relay then sends each key's messages
	// one request at a time. Keyed messages given to Send together had one name here.
	QueueOf(topic, shardingKey string) (queue string, ok bool)
}

// SendErrorKind says what a failed send means for its messages: whether the attempt counts
// against max_retry_count, and whether the messages, their topic or their broker is at fault.
// The relay acts on the kind alone (docs/decisions.md, "Failure accounting").
type SendErrorKind uint8

const (
	// SendTransient is a failure the broker or the network may not repeat: a timeout, a
	// dropped or reset connection, the broker busy. It counts only when it singles its
	// message out (the only transient failure of its broker in the incident window).
	SendTransient SendErrorKind = iota
	// SendUnreachable is a send that reached no broker (connection refused, no broker
	// registered, no name server answering): the message was certainly not stored, and the
	// attempt never counts.
	SendUnreachable
	// SendRefused is a broker's refusal of this message: the attempt counts, and a refused
	// batch is retried one message at a time so that one bad message cannot fail the rest.
	SendRefused
	// SendPermanent is a message that can never be sent as it is: it goes dead at once.
	SendPermanent
	// SendTopicMissing is a topic the name servers have no route for while they list live
	// brokers: a misspelt topic, or one not created where autoCreateTopicEnable=false. The
	// attempt counts, so such rows end dead after their retries.
	SendTopicMissing
	// SendMisconfigured is a refusal only the operator's configuration can cure: credentials
	// refused (a wrong secret key), no permission on the topic, a topic of another message
	// type (FIFO), a proxy that needs what the client does not send. The attempt does not
	// count, so nothing goes dead for it; the rows wait, backing off, and the relay reports
	// the topic as misconfigured (log, metric, health) until a send of it succeeds.
	SendMisconfigured
	// SendUnreplicated is a message the broker stored on its master but did not flush or
	// replicate as asked (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT, FLUSH_DISK_TIMEOUT),
	// reported as a failure only when the publisher demands replication: the attempt counts,
	// and a batch is retried whole (its messages are stored, so splitting it adds copies).
	SendUnreplicated
)

var sendErrorKindNames = [...]string{"transient", "unreachable", "refused", "permanent", "topic_missing", "misconfigured", "unreplicated"}

// SendErrorKinds returns every kind, in the order of their values.
func SendErrorKinds() []SendErrorKind {
	kinds := make([]SendErrorKind, len(sendErrorKindNames))
	for i := range kinds {
		kinds[i] = SendErrorKind(i)
	}
	return kinds
}

// String returns the kind's name as metrics and logs show it.
func (k SendErrorKind) String() string {
	if int(k) < len(sendErrorKindNames) {
		return sendErrorKindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// SendError is a failed send, classified once, where the broker's answer is read: the one
// way a Publisher says what an error means. KindOf also reads the deprecated marks.
type SendError struct {
	// Kind says what the failure means for the messages.
	Kind SendErrorKind
	// Broker is the address of the broker the send went to; empty when none was chosen.
	Broker string
	// Code is the broker's response code when a broker answered, else -1.
	Code int
	// Err is the cause, as the client reported it.
	Err error
}

func (e *SendError) Error() string {
	if e.Broker != "" {
		return e.Err.Error() + " (broker " + e.Broker + ")"
	}
	return e.Err.Error()
}

// Unwrap returns the cause.
func (e *SendError) Unwrap() error { return e.Err }

// KindOf returns what a Publisher's error means: the Kind of a *SendError it wraps, else the
// kind its deprecated marks say (Permanent, Refused, ErrTopicNotFound, ErrBrokerUnreachable),
// else SendTransient.
func KindOf(err error) SendErrorKind {
	var se *SendError
	switch {
	case errors.As(err, &se):
		return se.Kind
	case IsPermanent(err):
		return SendPermanent
	case IsRefused(err):
		return SendRefused
	case errors.Is(err, ErrTopicNotFound):
		return SendTopicMissing
	case errors.Is(err, ErrBrokerUnreachable):
		return SendUnreachable
	}
	return SendTransient
}

// PermanentError marks a failure that no retry can cure (an invalid topic, a body the broker
// refuses): the relay marks the message dead at once with the error as its reason.
//
// Deprecated: return &SendError{Kind: SendPermanent, Code: -1, Err: err}.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the relay does not retry it.
//
// Deprecated: return &SendError{Kind: SendPermanent, Code: -1, Err: err}.
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
//
// Deprecated: return a *SendError of kind SendUnreachable; test with
// KindOf(err) == SendUnreachable.
var ErrBrokerUnreachable = errors.New("broker unreachable")

// ErrTopicNotFound marks, wrapped by a Publisher, a send whose topic has no route although
// the name servers answered: a misspelt topic, or one not created on a cluster with
// autoCreateTopicEnable=false. The attempt counts, so such rows end dead with the reason after
// their retries instead of waiting forever; the other rows of the table are not held up.
//
// Deprecated: return a *SendError of kind SendTopicMissing; test with
// KindOf(err) == SendTopicMissing.
var ErrTopicNotFound = errors.New("topic has no route on the name servers")

// BrokerError attributes a send's error to the broker it was sent to.
//
// Deprecated: set SendError.Broker; read it with BrokerOf.
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
//
// Deprecated: set SendError.Broker; read it with BrokerOf.
func AtBroker(addr string, err error) error {
	if err == nil || addr == "" {
		return err
	}
	return &BrokerError{Broker: addr, Err: err}
}

// BrokerOf returns the broker address err is attributed to, or "" when none is.
func BrokerOf(err error) string {
	var se *SendError
	if errors.As(err, &se) && se.Broker != "" {
		return se.Broker
	}
	var b *BrokerError
	if errors.As(err, &b) {
		return b.Broker
	}
	return ""
}

// RefusedError marks an answer of the broker refusing a send: it read the request, so when a
// batch is refused one message of it may be at fault.
//
// Deprecated: return &SendError{Kind: SendRefused, Code: -1, Err: err}.
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }

// Unwrap returns the broker's answer.
func (e *RefusedError) Unwrap() error { return e.Err }

// Refused wraps the broker's refusal err.
//
// Deprecated: return &SendError{Kind: SendRefused, Code: -1, Err: err}.
func Refused(err error) error {
	if err == nil {
		return nil
	}
	return &RefusedError{Err: err}
}

// IsRefused reports whether err, or an error it wraps, is a *RefusedError.
//
// Deprecated: use KindOf(err) == SendRefused, which reads SendError too.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// IsPermanent reports whether err, or an error it wraps, is a *PermanentError.
//
// Deprecated: use KindOf(err) == SendPermanent, which reads SendError too.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
