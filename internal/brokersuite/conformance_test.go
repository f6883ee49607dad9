// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"bytes"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/publishertest"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// TestPublisherConformance runs the publisher conformance suite (relay/publishertest) on the
// RocketMQ publisher and Apache RocketMQ 5.3.3: broker-a reached directly (its refused
// configuration: a user without permission on the ACL 2.0 broker), and broker-proxied
// through the 5.x proxy (its refused configuration: an unordered route to a FIFO topic;
// its ordered keys go to FIFO topics). The items that need injected faults run on rmqtest
// only (relay/publishertest's own tests).
func TestPublisherConformance(t *testing.T) {
	t.Parallel() // its own topics: it overlaps the suite's other broker tests
	t.Run("rocketmq", func(t *testing.T) {
		b := &target{name: "rocketmq", nameServer: testenv.RocketMQ(t), brokerAddr: testenv.RocketMQBroker()}
		tg := conformanceTarget(b, b.nameServer)
		tg.Misconfigured = func(t *testing.T) (relay.Publisher, string) {
			acl := aclTarget(t)
			user, secret, _ := strings.Cut(deployments(t)["OUTBOX_TEST_ROCKETMQ_ACL_NOPERM_USER"], ":")
			return newConformancePublisher(t, acl.nameServer, user, secret), acl.mqadminTopic(t, "conformance_acl")
		}
		publishertest.Run(t, tg)
	})
	t.Run("proxy", func(t *testing.T) {
		b := proxyTarget(t)
		tg := conformanceTarget(b, b.nameServers)
		through := &target{name: "through the proxy", nameServer: b.nameServers}
		tg.NewTopic = func(t *testing.T) string {
			topic := b.topic(t, "conformance")
			through.waitSendable(t, topic) // the proxy's route too
			return topic
		}
		tg.NewOrderedTopic = func(t *testing.T) string { return b.fifoTopic(t, "conformance_fifo") }
		tg.Misconfigured = func(t *testing.T) (relay.Publisher, string) {
			return newConformancePublisher(t, b.nameServers, "", ""), b.fifoTopic(t, "conformance_fifo")
		}
		publishertest.Run(t, tg)
	})
}

// conformanceTarget is b's broker, published to through the name server (or proxy) ns and
// read back from b.brokerAddr.
func conformanceTarget(b *target, ns string) publishertest.Target {
	return publishertest.Target{
		NewPublisher: func(t *testing.T) relay.Publisher { return newConformancePublisher(t, ns, "", "") },
		NewTopic:     func(t *testing.T) string { return b.topic(t, "conformance") },
		Stored: func(ctx context.Context, topic string) ([]publishertest.Stored, error) {
			return pullAll(ctx, b.brokerAddr, topic)
		},
		// The broker indexes a message for pulls a moment after it answers the send.
		ReadLag:        10 * time.Second,
		MaxMessageSize: 4 << 20, // scripts/rocketmq.sh's maxMessageSize
	}
}

// newConformancePublisher returns a RocketMQ publisher of the name servers ns, signing as
// user with secret when user is not empty.
func newConformancePublisher(t *testing.T, ns, user, secret string) relay.Publisher {
	t.Helper()
	p, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{ns}, AccessKey: user, SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// pullAll reads every message of topic's four queues (the suite's topics have four) from
// the broker at addr, inflating compressed bodies.
func pullAll(ctx context.Context, addr, topic string) ([]publishertest.Stored, error) {
	c, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []publishertest.Stored
	for q := range 4 {
		for off := int64(0); ; {
			p, err := c.Pull(ctx, "conformance_reader", topic, q, off, 32)
			if err != nil {
				return nil, err
			}
			for _, m := range p.Messages {
				s, err := storedOf(addr, m)
				if err != nil {
					return nil, err
				}
				out = append(out, s)
			}
			if len(p.Messages) == 0 || p.Next <= off {
				break
			}
			off = p.Next
		}
	}
	return out, nil
}

// storedOf is m as the suite reads it.
func storedOf(addr string, m *remoting.Message) (publishertest.Stored, error) {
	body := m.Body
	if m.Compressed {
		r, err := zlib.NewReader(bytes.NewReader(body))
		if err != nil {
			return publishertest.Stored{}, fmt.Errorf("inflate message at offset %d: %w", m.QueueOffset, err)
		}
		if body, err = io.ReadAll(io.LimitReader(r, 8<<20)); err != nil {
			return publishertest.Stored{}, fmt.Errorf("inflate message at offset %d: %w", m.QueueOffset, err)
		}
	}
	return publishertest.Stored{Queue: fmt.Sprintf("%s/%d", addr, m.QueueID), Offset: m.QueueOffset,
		Tag: m.Properties["TAGS"], Keys: strings.Fields(m.Properties["KEYS"]), Body: body, Properties: m.Properties}, nil
}
