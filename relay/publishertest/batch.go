// SPDX-License-Identifier: Apache-2.0

package publishertest

import (
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/relay"
)

// batch: several messages given to one Send are acknowledged whole or failed whole.
func (s *suite) batch(t *testing.T) {
	t.Run("AcknowledgedWhole", s.batchWhole)
	t.Run("RefusedWhole", s.batchRefused)
}

// batchWhole: an acknowledged batch stores every message, each with its own tag, keys and
// properties.
func (s *suite) batchWhole(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	msgs := make([]*relay.Message, 10)
	for i := range msgs {
		m := message(topic, fmt.Sprintf("batch%d", i), fmt.Appendf(nil, `{"n":%d}`, i))
		m.Tag = fmt.Sprintf("tag%d", i%3)
		m.Properties = map[string]string{"n": fmt.Sprint(i)}
		msgs[i] = m
	}
	mustSend(t, p, relay.Route{}, msgs...)
	got := s.await(t, topic, msgs...)
	for _, m := range msgs {
		expectStored(t, m, got)
	}
}

// batchRefused: a batch holding one message over the broker's size limit fails whole: none
// of its messages is stored, and the error is SendRefused, so that the relay sends them one
// by one (SendPermanent would make every message of the batch dead).
func (s *suite) batchRefused(t *testing.T) {
	p, topic := s.publisher(t), s.NewTopic(t)
	msgs := make([]*relay.Message, 5)
	for i := range msgs {
		msgs[i] = message(topic, fmt.Sprintf("refused%d", i), fmt.Appendf(nil, `{"n":%d}`, i))
	}
	msgs[2].Body = oversized(s.MaxMessageSize)
	err := send(p, relay.Route{}, msgs...)
	if err == nil {
		t.Errorf("a batch holding a message of %d bytes (the broker takes %d) was acknowledged", len(msgs[2].Body), s.MaxMessageSize)
	} else if k := relay.KindOf(err); k != relay.SendRefused {
		t.Errorf("refused batch: kind %s, want %s (%v)", k, relay.SendRefused, err)
	}
	s.sendMarker(t, p, topic)
	ids := byMsgID(s.stored(t, topic))
	for _, m := range msgs {
		if n := len(ids[m.MsgID]); n > 0 && err != nil {
			t.Errorf("%s: stored %d time(s) although its batch failed: a failed batch must store none of its messages", describe(m), n)
		}
	}
}

// oversized returns a body of random bytes (which no compression shrinks) 1 KiB over max.
func oversized(max int) []byte {
	b := make([]byte, max+1024)
	_, _ = rand.Read(b)
	return b
}
