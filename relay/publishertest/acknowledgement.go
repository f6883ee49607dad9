// SPDX-License-Identifier: Apache-2.0

package publishertest

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// msgIDProperty is the property that carries a message's MsgID to consumers.
const msgIDProperty = outbox.MsgIDProperty

// acknowledgement: a nil error from Send means the broker stores the message as it was given.
func (s *suite) acknowledgement(t *testing.T) {
	t.Run("StoredAsSent", s.storedAsSent)
	t.Run("BodiesByteForByte", s.bodiesByteForByte)
	t.Run("ConcurrentSends", s.concurrentSends)
	t.Run("EmptySendIsNoop", s.emptySend)
	t.Run("CancelledContextIsNoAcknowledgement", s.cancelledContext)
}

// storedAsSent: one message with a tag, two keys and user properties is stored with each.
func (s *suite) storedAsSent(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	m := message(topic, "single", []byte(`{"orderSn":"SN1","note":"订单 ✓"}`))
	m.Tag, m.Keys = "created", []string{"SN1", "U1"}
	m.Properties = map[string]string{"tenant": "acme", "note": "naïve ✓"}
	mustSend(t, p, relay.Route{}, m)
	expectStored(t, m, s.await(t, topic, m))
}

// bodiesByteForByte: every byte value, and a body over the client's compression threshold,
// come back as sent.
func (s *suite) bodiesByteForByte(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	large := bytes.Repeat([]byte(`{"line":"a compressible line of an order"},`), min(64<<10, s.MaxMessageSize/2)/43)
	msgs := []*relay.Message{message(topic, "bytes", all), message(topic, "large", large)}
	for _, m := range msgs {
		mustSend(t, p, relay.Route{}, m)
	}
	got := s.await(t, topic, msgs...)
	for _, m := range msgs {
		expectStored(t, m, got)
	}
}

// concurrentSends: Send is called from many goroutines at once; every acknowledged
// message is stored.
func (s *suite) concurrentSends(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	const senders, each = 8, 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		sent []*relay.Message
	)
	for g := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				m := message(topic, "concurrent", []byte(strings.Repeat("x", 10+g)))
				if err := send(p, relay.Route{}, m); err != nil {
					t.Errorf("send %s: %v", m.MsgID, err)
					continue
				}
				mu.Lock()
				sent = append(sent, m)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	got := s.await(t, topic, sent...)
	for _, m := range sent {
		expectStored(t, m, got)
	}
}

// emptySend: a Send of no message is acknowledged and stores nothing.
func (s *suite) emptySend(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	if err := send(p, relay.Route{}); err != nil {
		t.Fatalf("send of no message: %v", err)
	}
	marker := s.sendMarker(t, p, topic)
	ids := byMsgID(s.stored(t, topic))
	delete(ids, "") // a target's own probes carry no msg id
	if len(ids) != 1 {
		t.Errorf("%d messages stored in %s, want only the marker %s", len(ids), topic, marker)
	}
}

// cancelledContext: a Send whose context is already done is no acknowledgement.
func (s *suite) cancelledContext(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	mustSend(t, p, relay.Route{}, message(topic, "warm", []byte("warm"))) // connections open
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Send(ctx, relay.Route{}, message(topic, "cancelled", []byte("x"))); err == nil {
		t.Error("send with a cancelled context returned nil: the relay would mark the row sent without the broker's acknowledgement")
	}
}

// sendMarker sends one message and returns its msg id once it is stored: the messages sent
// before it, to the same broker, have been stored or refused by then.
func (s *suite) sendMarker(t *testing.T, p relay.Publisher, topic string) string {
	t.Helper()
	m := message(topic, "marker", []byte("marker"))
	mustSend(t, p, relay.Route{}, m)
	expectStored(t, m, s.await(t, topic, m))
	return m.MsgID
}

// expectStored checks that got holds m at least once, every copy carrying m's body, tag,
// keys, msg id and user properties.
func expectStored(t *testing.T, m *relay.Message, got []Stored) {
	t.Helper()
	copies := byMsgID(got)[m.MsgID]
	if len(copies) == 0 {
		t.Errorf("%s: acknowledged but not stored (%d messages stored in %s)", describe(m), len(got), m.Topic)
		return
	}
	for _, c := range copies {
		if !bytes.Equal(c.Body, m.Body) {
			t.Errorf("%s: stored body %.40q (%d bytes), want %.40q", describe(m), c.Body, len(c.Body), m.Body)
		}
		if c.Tag != m.Tag {
			t.Errorf("%s: stored tag %q, want %q", describe(m), c.Tag, m.Tag)
		}
		if !slices.Equal(c.Keys, m.Keys) {
			t.Errorf("%s: stored keys %q, want %q", describe(m), c.Keys, m.Keys)
		}
		for k, v := range m.Properties {
			if c.Properties[k] != v {
				t.Errorf("%s: stored property %s=%q, want %q (stored: %v)", describe(m), k, c.Properties[k], v, slices.Sorted(maps.Keys(c.Properties)))
			}
		}
	}
}
