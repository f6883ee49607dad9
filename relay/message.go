// SPDX-License-Identifier: Apache-2.0

package relay

import "github.com/outbox-relay/outbox-relay/relay/message"

// The types users name, kept here as aliases of package relay/message, where they live, so
// that code written against package relay keeps compiling.
type (
	// Message is message.Message: one outbox row as the relay publishes it.
	Message = message.Message
	// Route is message.Route: how messages of a topic and tag are published.
	Route = message.Route
	// Router is message.Router: it chooses the Route of a message.
	Router = message.Router
	// RouterFunc is message.RouterFunc: a function as a Router.
	RouterFunc = message.RouterFunc
	// PatternRule is message.PatternRule: glob patterns of topic and tag mapped to a Route.
	PatternRule = message.PatternRule
	// PatternRouter is message.PatternRouter: routes by the first rule that matches.
	PatternRouter = message.PatternRouter
	// Publisher is message.Publisher: it sends messages to the broker.
	Publisher = message.Publisher
	// KeyBatcher is message.KeyBatcher: a Publisher that batches several sharding keys.
	KeyBatcher = message.KeyBatcher
	// SendError is message.SendError: a failed send, classified.
	SendError = message.SendError
	// SendErrorKind is message.SendErrorKind: what a failed send means for its messages.
	SendErrorKind = message.SendErrorKind
)

// The kinds of a failed send (message.SendErrorKind).
const (
	SendTransient     = message.SendTransient
	SendUnreachable   = message.SendUnreachable
	SendRefused       = message.SendRefused
	SendPermanent     = message.SendPermanent
	SendTopicMissing  = message.SendTopicMissing
	SendMisconfigured = message.SendMisconfigured
	SendUnreplicated  = message.SendUnreplicated
)

// The marks of a Publisher's errors that predate SendError (message.ErrBrokerUnreachable,
// message.ErrTopicNotFound).
var (
	// Deprecated: return a *SendError of kind SendUnreachable.
	ErrBrokerUnreachable = message.ErrBrokerUnreachable
	// Deprecated: return a *SendError of kind SendTopicMissing.
	ErrTopicNotFound = message.ErrTopicNotFound
)

// DefaultRouter is message.DefaultRouter: every message with the publisher's defaults.
var DefaultRouter = message.DefaultRouter

// NewPatternRouter is message.NewPatternRouter.
func NewPatternRouter(rules ...PatternRule) (*PatternRouter, error) {
	return message.NewPatternRouter(rules...)
}

// KindOf is message.KindOf: what a Publisher's error means.
func KindOf(err error) SendErrorKind { return message.KindOf(err) }

// Permanent is message.Permanent: err marked as never curable by a retry.
//
// Deprecated: return &SendError{Kind: SendPermanent, Code: -1, Err: err}.
func Permanent(err error) error { return message.Permanent(err) }
