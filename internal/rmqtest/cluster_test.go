// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// TestClusterRoutesBothBrokers: a topic's route lists the queues of both brokers, a
// round-robin producer stores on both, and a push consumer reads from both; with the first
// of two name servers down the client still gets its route from the second.
func TestClusterRoutesBothBrokers(t *testing.T) {
	t.Parallel()
	c, err := StartCluster(ClusterOptions{NameServers: 2, Broker: Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.CreateTopic("Clustered", 2)
	c.StopNameServer(0)

	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(c.NameServerAddrs())),
		producer.WithInstanceName(instanceName(t)),
		producer.WithQueueSelector(producer.NewRoundRobinQueueSelector()),
		producer.WithRetry(0),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	h := &producerHandle{p: p}
	const n = 40
	for i := range n {
		if _, err := h.send(3*time.Second, primitive.NewMessage("Clustered", []byte(fmt.Sprint(i)))); err != nil {
			t.Fatalf("send %d with the first name server down: %v", i, err)
		}
	}
	perBroker := map[string]int{}
	for _, m := range c.Messages("Clustered") {
		perBroker[m.BrokerName]++
	}
	if perBroker["broker-a"] == 0 || perBroker["broker-b"] == 0 || perBroker["broker-a"]+perBroker["broker-b"] != n {
		t.Fatalf("stored per broker %v, want %d over broker-a and broker-b", perBroker, n)
	}
	if err := c.StartNameServer(0); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string]int{}
	cons, err := consumer.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver(c.NameServerAddrs())),
		consumer.WithInstance(instanceName(t)),
		consumer.WithGroupName("cluster-readers"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		t.Fatal(err)
	}
	h2 := consumerHandle{c: cons}
	h2.run(t, "Clustered", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			got[m.Queue.BrokerName]++
		}
		return consumer.ConsumeSuccess, nil
	})
	waitFor(t, 20*time.Second, "every message consumed from both brokers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["broker-a"] == perBroker["broker-a"] && got["broker-b"] == perBroker["broker-b"]
	})
}
