// SPDX-License-Identifier: Apache-2.0

package publishertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/publishertest"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

func init() { rlog.SetLogLevel("error") }

// TestRocketMQPublisherOnRmqtest runs the conformance suite on the RocketMQ publisher and
// the in-process test broker, every fault case included.
func TestRocketMQPublisherOnRmqtest(t *testing.T) {
	publishertest.Run(t, rmqtestTarget(t, nil))
}

// rmqtestMaxMessageSize keeps the suite's oversized messages small.
const rmqtestMaxMessageSize = 64 << 10

// rmqtestTarget is a test broker of topics created explicitly, with fault injection; wrap,
// when not nil, wraps each publisher the suite is given.
func rmqtestTarget(t *testing.T, wrap func(relay.Publisher) relay.Publisher) publishertest.Target {
	srv := startBroker(t, nil)
	if wrap == nil {
		wrap = func(p relay.Publisher) relay.Publisher { return p }
	}
	return publishertest.Target{
		NewPublisher:   func(t *testing.T) relay.Publisher { return wrap(newPublisher(t, srv, "")) },
		NewTopic:       func(*testing.T) string { return newTopic(srv) },
		Stored:         func(_ context.Context, topic string) ([]publishertest.Stored, error) { return stored(srv, topic), nil },
		MaxMessageSize: rmqtestMaxMessageSize,
		Misconfigured: func(t *testing.T) (relay.Publisher, string) {
			acl := startBroker(t, map[string]string{"relay": "the-secret"})
			return wrap(newPublisher(t, acl, "a-wrong-secret")), newTopic(acl)
		},
		Faults: rmqFaults{srv},
	}
}

// startBroker starts a test broker that creates no topic on first use, checking signatures
// of credentials when not nil.
func startBroker(t *testing.T, credentials map[string]string) *rmqtest.Server {
	t.Helper()
	srv, err := rmqtest.Start(rmqtest.Options{NoAutoCreateTopics: true, MaxMessageSize: rmqtestMaxMessageSize,
		Credentials: credentials, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// newPublisher returns a RocketMQ publisher of srv, signing as user "relay" with secret
// when it is not empty.
func newPublisher(t *testing.T, srv *rmqtest.Server, secret string) relay.Publisher {
	t.Helper()
	cfg := rocketmq.Config{NameServers: []string{srv.NameServerAddr()}}
	if secret != "" {
		cfg.AccessKey, cfg.SecretKey = "relay", secret
	}
	p, err := rocketmq.NewPublisher(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newTopic(srv *rmqtest.Server) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "conformance_" + hex.EncodeToString(b)
	srv.CreateTopic(name, 4)
	return name
}

func stored(srv *rmqtest.Server, topic string) []publishertest.Stored {
	var out []publishertest.Stored
	for _, m := range srv.Messages(topic) {
		out = append(out, publishertest.Stored{Queue: fmt.Sprintf("%s/%d", m.BrokerName, m.QueueID), Offset: m.QueueOffset,
			Tag: m.Tags, Keys: m.Keys, Body: m.Body, Properties: m.Properties})
	}
	return out
}

// rmqFaults injects the suite's faults with the test broker's own.
type rmqFaults struct{ srv *rmqtest.Server }

func (f rmqFaults) Inject(t *testing.T, topic string, fault publishertest.Fault) {
	rate := func(on bool) float64 {
		if on {
			return 1
		}
		return 0
	}
	f.srv.SetTopicFaults(topic, rmqtest.Faults{ErrorRate: rate(fault.Code != 0), ErrorCode: int16(fault.Code), ErrorRemark: fault.Remark,
		Latency: fault.Latency, DropBeforeStore: rate(fault.DropBeforeStore), DropAfterStore: rate(fault.DropAfterStore),
		Unreplicated: rate(fault.Unreplicated)})
	t.Cleanup(func() { f.srv.SetTopicFaults(topic, rmqtest.Faults{}) })
}

func (f rmqFaults) StopBroker(t *testing.T) {
	f.srv.StopBroker()
	t.Cleanup(func() {
		if err := f.srv.StartBroker(); err != nil {
			t.Error(err)
		}
	})
}
