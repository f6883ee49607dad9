// SPDX-License-Identifier: Apache-2.0

package remoting_test

import (
	"context"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

// TestLiveBrokers asks the test broker's name server for its brokers, which it answers in
// fastjson's shape (unquoted number keys), while the broker runs and after it stops.
func TestLiveBrokers(t *testing.T) {
	srv, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	n, err := remoting.LiveBrokers(ctx, srv.NameServerAddr())
	if err != nil || n != 1 {
		t.Fatalf("LiveBrokers with the broker running = %d, %v; want 1", n, err)
	}
	srv.StopBroker()
	n, err = remoting.LiveBrokers(ctx, srv.NameServerAddr())
	if err != nil || n != 0 {
		t.Fatalf("LiveBrokers with the broker stopped = %d, %v; want 0", n, err)
	}
}

// TestLiveBrokersCluster counts the brokers of a cluster, some stopped.
func TestLiveBrokersCluster(t *testing.T) {
	c, err := rmqtest.StartCluster(rmqtest.ClusterOptions{Brokers: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Broker(1).StopBroker()
	n, err := remoting.LiveBrokers(context.Background(), c.NameServerAddrs()[0])
	if err != nil || n != 2 {
		t.Fatalf("LiveBrokers = %d, %v; want 2 of 3", n, err)
	}
}

// TestLiveBrokersRefused: a closed port is an error, not zero brokers.
func TestLiveBrokersRefused(t *testing.T) {
	if _, err := remoting.LiveBrokers(context.Background(), "127.0.0.1:1"); err == nil {
		t.Fatal("LiveBrokers of a closed port succeeded")
	}
}

// TestMasters reads the master of every broker from the name server's fastjson answer.
func TestMasters(t *testing.T) {
	c, err := rmqtest.StartCluster(rmqtest.ClusterOptions{Brokers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := remoting.Masters(context.Background(), c.NameServerAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[c.Broker(0).BrokerName()] != c.Broker(0).BrokerAddr() || m[c.Broker(1).BrokerName()] != c.Broker(1).BrokerAddr() {
		t.Fatalf("Masters = %v", m)
	}
}

// TestFindMasters merges the masters of the name servers that answer, skips one that does
// not, stops once enough is known, and fails only when no name server answers.
func TestFindMasters(t *testing.T) {
	c, err := rmqtest.StartCluster(rmqtest.ClusterOptions{Brokers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	live := c.NameServerAddrs()[0]
	m, err := remoting.FindMasters(ctx, []string{"127.0.0.1:1", live}, nil)
	if err != nil || len(m) != 2 || m[c.Broker(1).BrokerName()] != c.Broker(1).BrokerAddr() {
		t.Fatalf("FindMasters with one dead name server = %v, %v", m, err)
	}
	asked := 0
	m, err = remoting.FindMasters(ctx, []string{live, "127.0.0.1:1"}, func(m map[string]string) bool { asked++; return len(m) > 0 })
	if err != nil || len(m) != 2 || asked != 1 {
		t.Fatalf("FindMasters stopping when enough = %v, %v after %d answers", m, err, asked)
	}
	if m, err := remoting.FindMasters(ctx, []string{"127.0.0.1:1"}, nil); err == nil || len(m) != 0 {
		t.Fatalf("FindMasters with no name server answering = %v, %v; want an error", m, err)
	}
}

// TestBinaryHeaderAnswersRead: a name server and a broker started with
// rocketmq.serialize.type=ROCKETMQ answer the relay's JSON requests with binary headers; the
// probes, the master lookup and a connection's calls read them.
func TestBinaryHeaderAnswersRead(t *testing.T) {
	srv, err := rmqtest.Start(rmqtest.Options{BinaryHeaders: true, Topics: []string{"Known"}, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	if ok, err := remoting.TopicRouted(ctx, srv.NameServerAddr(), "Known"); err != nil || !ok {
		t.Fatalf("TopicRouted(Known) = %v, %v", ok, err)
	}
	if ok, err := remoting.TopicRouted(ctx, srv.NameServerAddr(), "Unknown"); err != nil || ok {
		t.Fatalf("TopicRouted(Unknown) = %v, %v", ok, err)
	}
	if n, err := remoting.LiveBrokers(ctx, srv.NameServerAddr()); err != nil || n != 1 {
		t.Fatalf("LiveBrokers = %d, %v", n, err)
	}
	m, err := remoting.FindMasters(ctx, []string{srv.NameServerAddr()}, nil)
	if err != nil || m["broker-a"] != srv.BrokerAddr() {
		t.Fatalf("FindMasters = %v, %v", m, err)
	}
	c, err := remoting.Dial(ctx, srv.BrokerAddr(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Invoke(ctx, remoting.HeartBeat, nil, []byte(`{"clientID":"c","producerDataSet":[{"groupName":"g"}],"consumerDataSet":[]}`))
	if err != nil || resp.Code != 0 || c.Closed() {
		t.Fatalf("heartbeat = %+v, %v", resp, err)
	}
}
