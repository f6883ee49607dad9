// SPDX-License-Identifier: Apache-2.0

package publishertest

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
)

// failureKinds: each failure comes back as the kind that the relay's failure accounting
// (docs/decisions.md, "Failure accounting") needs to treat its messages right.
func (s *suite) failureKinds(t *testing.T) {
	t.Run("UnknownTopicIsTopicMissing", s.unknownTopic)
	t.Run("OversizedMessageIsPermanent", s.oversizedMessage)
	t.Run("ConfigurationRefusalIsMisconfigured", s.misconfigured)
	for _, c := range faultCases {
		t.Run(c.name, func(t *testing.T) { s.faultCase(t, c) })
	}
	t.Run("BrokerDownIsUnreachable", s.brokerDown)
}

// unknownTopic: a topic that was never created, on a broker that creates none on first
// use, is SendTopicMissing (the attempt counts, so such rows end dead, not waiting forever).
func (s *suite) unknownTopic(t *testing.T) {
	p := s.publisher(t)
	s.NewTopic(t) // the broker is up and routes topics: only this one is missing
	m := message("NoSuchTopic_"+randomHex(4), "missing", []byte("x"))
	expectKind(t, send(p, relay.Route{}, m), relay.SendTopicMissing)
}

// oversizedMessage: a message over the broker's size limit, sent alone, is SendPermanent:
// no retry can cure it, so its row goes dead at once with the reason.
func (s *suite) oversizedMessage(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	m := message(topic, "oversized", oversized(s.MaxMessageSize))
	expectKind(t, send(p, relay.Route{}, m), relay.SendPermanent)
}

// misconfigured: a send the broker refuses for the publisher's configuration (credentials,
// permission, the topic's message type) is SendMisconfigured: the attempt does not count,
// nothing goes dead for it, and the topic is reported until an operator fixes it.
func (s *suite) misconfigured(t *testing.T) {
	if s.Misconfigured == nil {
		t.Skip("the target has no refusing configuration (Target.Misconfigured)")
	}
	p, topic := s.Misconfigured(t)
	t.Cleanup(func() { _ = p.Close() })
	expectKind(t, send(p, relay.Route{}, message(topic, "misconfigured", []byte("x"))), relay.SendMisconfigured)
}

// faultCase is one injected broker behaviour and the kind a send meeting it must get.
type faultCase struct {
	name  string
	fault Fault
	route relay.Route
	// ok: the send must be acknowledged (the message is stored).
	ok   bool
	want relay.SendErrorKind
}

// faultCases are the answers of docs/decisions.md's failure-accounting table that only an
// injected fault brings about, with the kind each must get.
var faultCases = []faultCase{
	{name: "BusyBrokerIsTransient", fault: Fault{Code: 2, Remark: "[TIMEOUT_CLEAN_QUEUE]broker busy"}, want: relay.SendTransient},
	{name: "ReadOnlyBrokerIsTransient", fault: Fault{Code: 16, Remark: "the broker[broker-a] sending message is forbidden"}, want: relay.SendTransient},
	{name: "RefusedMessageIsRefused", fault: Fault{Code: 25, Remark: "refused by the broker"}, want: relay.SendRefused},
	{name: "IllegalMessageIsPermanent", fault: Fault{Code: 13, Remark: "the message is illegal"}, want: relay.SendPermanent},
	{name: "TopicNotExistIsTopicMissing", fault: Fault{Code: 17, Remark: "topic not exist"}, want: relay.SendTopicMissing},
	{name: "NoPermissionIsMisconfigured", fault: Fault{Code: 16, Remark: "No permission for topic"}, want: relay.SendMisconfigured},
	{name: "SlowBrokerIsTransient", fault: Fault{Latency: 10 * time.Second}, route: relay.Route{SendTimeout: 300 * time.Millisecond}, want: relay.SendTransient},
	{name: "DroppedConnectionIsTransient", fault: Fault{DropBeforeStore: true}, want: relay.SendTransient},
	{name: "LostAcknowledgementIsTransient", fault: Fault{DropAfterStore: true}, want: relay.SendTransient},
	{name: "StoredUnreplicatedIsAcknowledged", fault: Fault{Unreplicated: true}, ok: true},
}

// faultCase sends one message to a topic with c's fault and checks the send's outcome.
func (s *suite) faultCase(t *testing.T, c faultCase) {
	if s.Faults == nil {
		t.Skip("the target injects no faults (Target.Faults)")
	}
	p, topic := s.publisher(t), s.NewTopic(t)
	s.Faults.Inject(t, topic, c.fault)
	m := message(topic, "fault", []byte("x"))
	err := send(p, c.route, m)
	if c.ok {
		if err != nil {
			t.Fatalf("send: %v (kind %s), want it acknowledged", err, relay.KindOf(err))
		}
		expectStored(t, m, s.await(t, topic, m))
		return
	}
	expectKind(t, err, c.want)
}

// brokerDown: a send that reaches no broker (the broker stopped, its name servers up) is
// SendUnreachable: the message was certainly not stored, and the attempt never counts.
func (s *suite) brokerDown(t *testing.T) {
	if s.Faults == nil {
		t.Skip("the target cannot stop its broker (Target.Faults)")
	}
	p, topic := s.publisher(t), s.NewTopic(t)
	s.Faults.StopBroker(t)
	expectKind(t, send(p, relay.Route{}, message(topic, "down", []byte("x"))), relay.SendUnreachable)
}

// expectKind checks that err is a failure of kind want.
func expectKind(t *testing.T, err error, want relay.SendErrorKind) {
	t.Helper()
	if err == nil {
		t.Fatalf("send acknowledged, want a failure of kind %s", want)
	}
	if got := relay.KindOf(err); got != want {
		t.Errorf("kind %s, want %s (%v)", got, want, err)
	}
}
