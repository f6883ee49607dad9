// SPDX-License-Identifier: Apache-2.0

package message

import (
	"fmt"
	"path"
	"time"
)

// Route is how messages of a topic and tag are published.
type Route struct {
	// Group is the RocketMQ producer group. Empty: the publisher's default group.
	Group string
	// SendTimeout bounds one send. Zero: the publisher's default. The publisher's own
	// default (rocketmq.Config.SendTimeout) also bounds each attempt of the client.
	SendTimeout time.Duration
	// Ordered keeps the messages of one sharding_key in id order: they go to one queue, one
	// at a time, and a failing message holds back the later ones of its key until it is sent
	// or dead. Messages without a sharding_key are not ordered.
	Ordered bool
	// DelayLevel is RocketMQ's delay level (1-18, 0 for none), applied by the broker.
	DelayLevel int
}

// Router chooses the Route of a message. The relay calls it from one goroutine per table;
// implementations must be safe for concurrent use when shared between relays. ok false
// means no route: the relay then applies its UnroutedPolicy.
type Router interface {
	Route(topic, tag string) (route Route, ok bool)
}

// RouterFunc adapts a function to a Router.
type RouterFunc func(topic, tag string) (Route, bool)

// Route calls f.
func (f RouterFunc) Route(topic, tag string) (Route, bool) { return f(topic, tag) }

// PatternRule maps topic and tag glob patterns (path.Match syntax; "*" matches anything) to
// a Route.
type PatternRule struct {
	Topic, Tag string
	Route      Route
}

// PatternRouter routes by the first rule whose patterns match; it has no route for a message
// no rule matches.
type PatternRouter struct {
	rules []PatternRule
}

// NewPatternRouter checks the rules' patterns and delay levels and returns the router.
// An empty Tag pattern means "*".
func NewPatternRouter(rules ...PatternRule) (*PatternRouter, error) {
	out := make([]PatternRule, len(rules))
	for i, r := range rules {
		if r.Tag == "" {
			r.Tag = "*"
		}
		if _, err := path.Match(r.Topic, ""); err != nil || r.Topic == "" {
			return nil, fmt.Errorf("relay: route %d: bad topic pattern %q", i, r.Topic)
		}
		if _, err := path.Match(r.Tag, ""); err != nil {
			return nil, fmt.Errorf("relay: route %d: bad tag pattern %q", i, r.Tag)
		}
		if r.Route.DelayLevel < 0 || r.Route.DelayLevel > 18 {
			return nil, fmt.Errorf("relay: route %d: delay level %d is not between 0 and 18", i, r.Route.DelayLevel)
		}
		if r.Route.SendTimeout < 0 {
			return nil, fmt.Errorf("relay: route %d: negative send timeout", i)
		}
		out[i] = r
	}
	return &PatternRouter{rules: out}, nil
}

// Route returns the route of the first matching rule.
func (p *PatternRouter) Route(topic, tag string) (Route, bool) {
	for _, r := range p.rules {
		if ok, _ := path.Match(r.Topic, topic); !ok {
			continue
		}
		if ok, _ := path.Match(r.Tag, tag); ok {
			return r.Route, true
		}
	}
	return Route{}, false
}

// DefaultRouter routes every message with the publisher's default settings.
var DefaultRouter Router = RouterFunc(func(string, string) (Route, bool) { return Route{}, true })
