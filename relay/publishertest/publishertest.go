// SPDX-License-Identifier: Apache-2.0

package publishertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
)

// Target is a broker and the publisher under test. NewPublisher, NewTopic and Stored are
// required; the other fields switch on the items that need them.
type Target struct {
	// NewPublisher returns a new publisher of the broker; the suite closes it.
	NewPublisher func(t *testing.T) relay.Publisher
	// NewTopic creates a topic of at least two queues, with a name of its own, and returns
	// it once a send to it can succeed. The broker must not create topics on first use
	// (RocketMQ's autoCreateTopicEnable=false): a name never created is a missing topic.
	NewTopic func(t *testing.T) string
	// NewOrderedTopic creates a topic for ordered routes (a FIFO topic where the broker has
	// message types, as behind a 5.x proxy). Nil: NewTopic.
	NewOrderedTopic func(t *testing.T) string
	// Stored returns every message the broker stores in topic, each queue in offset order.
	Stored func(ctx context.Context, topic string) ([]Stored, error)
	// ReadLag is how long an acknowledged message may take to show in Stored (a broker
	// that indexes its queues after it answers). Zero: it shows at once.
	ReadLag time.Duration
	// MaxMessageSize is the largest message body the broker stores; the suite sends one
	// larger to see it refused. Zero: RocketMQ's default, 4 MiB.
	MaxMessageSize int
	// Misconfigured, when not nil, returns a publisher and a topic that the broker refuses
	// for the publisher's configuration (credentials, permission, message type).
	Misconfigured func(t *testing.T) (relay.Publisher, string)
	// Faults, when not nil, injects faults into the broker: the items that need a busy,
	// slow, refusing or stopped broker or a dropped connection run only with it.
	Faults Faults
}

// Stored is a message as the broker stores it.
type Stored struct {
	// Queue names the queue that holds the message (its broker and queue id).
	Queue string
	// Offset is the message's position in its queue.
	Offset int64
	// Tag and Keys are the message's tag and keys as the broker stores them.
	Tag  string
	Keys []string
	// Body is the body as the producer gave it (inflated if the client compressed it).
	Body []byte
	// Properties holds the message's properties, user ones and the broker's own.
	Properties map[string]string
}

// Fault is what a broker does with every send to one topic while it is injected.
type Fault struct {
	// Code, when not zero, answers every send with this response code and Remark, storing
	// nothing.
	Code   int
	Remark string
	// Latency delays each answer.
	Latency time.Duration
	// DropBeforeStore closes the connection without storing the message or answering.
	DropBeforeStore bool
	// DropAfterStore stores the message, then closes the connection without answering.
	DropAfterStore bool
	// Unreplicated stores the message and answers SLAVE_NOT_AVAILABLE, as a SYNC_MASTER
	// whose slave is down does.
	Unreplicated bool
}

// Faults injects faults into the target's broker.
type Faults interface {
	// Inject makes the broker treat every send to topic as f says, until the test ends.
	Inject(t *testing.T, topic string, f Fault)
	// StopBroker stops the broker (its name servers stay up) until the test ends.
	StopBroker(t *testing.T)
}

// Run runs the contract's items against target, each a subtest: Acknowledgement, Batch,
// FailureKinds, KeyedBatches (when the publisher is a relay.KeyBatcher) and OrderedKeys.
// Items that need something target lacks are skipped, saying what.
func Run(t *testing.T, target Target) {
	t.Helper()
	if target.NewPublisher == nil || target.NewTopic == nil || target.Stored == nil {
		t.Fatal("publishertest: Target needs NewPublisher, NewTopic and Stored")
	}
	if target.MaxMessageSize <= 0 {
		target.MaxMessageSize = 4 << 20
	}
	if target.NewOrderedTopic == nil {
		target.NewOrderedTopic = target.NewTopic
	}
	s := &suite{Target: target}
	t.Run("Acknowledgement", s.acknowledgement)
	t.Run("Batch", s.batch)
	t.Run("FailureKinds", s.failureKinds)
	t.Run("KeyedBatches", s.keyedBatches)
	t.Run("OrderedKeys", s.orderedKeys)
}

// suite holds the target while the items run.
type suite struct {
	Target
}

// sendTimeout bounds every send and read of the suite that is not about time.
const sendTimeout = 30 * time.Second

// publisher returns a new publisher, closed when the test ends.
func (s *suite) publisher(t *testing.T) relay.Publisher {
	t.Helper()
	p := s.NewPublisher(t)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// send sends msgs on route in one call, within sendTimeout.
func send(p relay.Publisher, route relay.Route, msgs ...*relay.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	return p.Send(ctx, route, msgs...)
}

// mustSend sends msgs and fails the test unless the publisher acknowledges them.
func mustSend(t *testing.T, p relay.Publisher, route relay.Route, msgs ...*relay.Message) {
	t.Helper()
	if err := send(p, route, msgs...); err != nil {
		t.Fatalf("send of %d message(s) to %s: %v (kind %s)", len(msgs), msgs[0].Topic, err, relay.KindOf(err))
	}
}

// message returns a message to topic with a msg id of its own, prefixed by name.
func message(topic, name string, body []byte) *relay.Message {
	id := name + "-" + randomHex(6)
	return &relay.Message{MsgID: id, Topic: topic, Keys: []string{id}, Body: body, MaxRetries: 3}
}

// stored reads what the broker stores in topic.
func (s *suite) stored(t *testing.T, topic string) []Stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
	defer cancel()
	got, err := s.Stored(ctx, topic)
	if err != nil {
		t.Fatalf("read back %s: %v", topic, err)
	}
	return got
}

// await returns what topic stores once every message of msgs shows in it, or what it
// stores when ReadLag has passed.
func (s *suite) await(t *testing.T, topic string, msgs ...*relay.Message) []Stored {
	t.Helper()
	deadline := time.Now().Add(s.ReadLag)
	for {
		got := s.stored(t, topic)
		ids := byMsgID(got)
		missing := 0
		for _, m := range msgs {
			if len(ids[m.MsgID]) == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// byMsgID indexes stored messages by their OUTBOX_MSG_ID property; a message stored twice
// appears once per copy.
func byMsgID(msgs []Stored) map[string][]Stored {
	out := map[string][]Stored{}
	for _, m := range msgs {
		id := m.Properties[msgIDProperty]
		out[id] = append(out[id], m)
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// describe names a message for failure messages.
func describe(m *relay.Message) string {
	return fmt.Sprintf("%s (tag %q, %d bytes)", m.MsgID, m.Tag, len(m.Body))
}
