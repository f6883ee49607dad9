// SPDX-License-Identifier: Apache-2.0

package publishertest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/publishertest"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// testRocketMQPublisher is a test of the RocketMQ publisher on a broker of the developer's
// own (name server in ROCKETMQ_NAMESRV, autoCreateTopicEnable=false).
func testRocketMQPublisher(t *testing.T) {
	ns := os.Getenv("ROCKETMQ_NAMESRV")
	if ns == "" {
		t.Skip("ROCKETMQ_NAMESRV is not set")
	}
	publishertest.Run(t, publishertest.Target{
		NewPublisher: func(t *testing.T) relay.Publisher {
			p, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{ns}})
			if err != nil {
				t.Fatal(err)
			}
			return p
		},
		NewTopic: func(t *testing.T) string { return createTopic(t, ns) },
		Stored: func(ctx context.Context, topic string) ([]publishertest.Stored, error) {
			return readTopic(ctx, ns, topic)
		},
		// A real broker makes a message readable a moment after it answers the send.
		ReadLag: 10 * time.Second,
	})
}

// createTopic creates a topic of four queues with a name of its own (mqadmin updateTopic,
// or rocketmq-client-go's admin API) and returns it once a send to it succeeds.
func createTopic(t *testing.T, nameServer string) string {
	t.Skip("create the topic with your broker's admin tool")
	return ""
}

// readTopic pulls every queue of topic from its first offset (a consumer group of the
// test's own, or the broker's message query).
func readTopic(ctx context.Context, nameServer, topic string) ([]publishertest.Stored, error) {
	return nil, nil
}

// A publisher's test runs the whole contract with Run; the suite creates topics, sends
// through the publisher and reads back what the broker stored.
func ExampleRun() {
	// In a _test.go file:
	//
	//	func TestRocketMQPublisher(t *testing.T) { testRocketMQPublisher(t) }
}
