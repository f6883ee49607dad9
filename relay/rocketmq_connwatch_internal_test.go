// SPDX-License-Identifier: Apache-2.0

package relay

import "testing"

// TestConnWatchHooksTheClient: the dropped-connection watcher reaches into the pinned
// rocketmq-client-go (its producer's client, remoting client and connection table). An
// upgrade that moves them turns the watcher off silently, so that a dropped connection costs
// its sends the full send timeout again: this test fails instead.
func TestConnWatchHooksTheClient(t *testing.T) {
	p, err := NewRocketMQPublisher(RocketMQConfig{NameServers: []string{"127.0.0.1:1"}, Connections: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := p.producer("")
	if err != nil {
		t.Fatal(err)
	}
	if !c.watched {
		t.Fatal("the producer's sends are not watched for dropped connections: rocketmq-client-go's layout changed (see rocketmq_connwatch.go)")
	}
}
