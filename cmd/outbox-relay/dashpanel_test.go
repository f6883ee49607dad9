// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// With verified TLS the client talks to the bridge's loopback listeners; the broker panel
// still names the real name server and broker, never a bridge address.
func TestBrokerPanelShowsTheServersBehindTheTLSBridge(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "right")
	srv := tlsBroker(t, ca)
	mq := config.RocketMQ{NameServers: []string{srv.NameServerAddr()},
		TLS: config.RocketMQTLS{Enable: true, CAFile: ca.WriteCA(t, dir), ServerName: "rocketmq.test"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	link, err := openRocketMQ(ctx, mq, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer link.close()
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: link.nameServers, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	if err := pub.Send(ctx, relay.Route{}, &relay.Message{MsgID: "m-1", Topic: "TlsOrders", Body: []byte("order")}); err != nil {
		t.Fatal(err)
	}
	p := brokerPanel(pub, nil, "", link.upstream)(ctx)
	if len(p.NameServers) != 1 || p.NameServers[0].Addr != srv.NameServerAddr() {
		t.Errorf("name servers %+v; want %s", p.NameServers, srv.NameServerAddr())
	}
	if len(p.Brokers) != 1 || p.Brokers[0].Addr != srv.BrokerAddr() {
		t.Errorf("brokers %+v; want %s", p.Brokers, srv.BrokerAddr())
	}
	for _, b := range append(p.NameServers, p.Brokers...) {
		for _, local := range link.nameServers {
			if strings.Contains(b.Addr+b.LastError, local) {
				t.Errorf("the panel shows the bridge's %s: %+v", local, b)
			}
		}
	}
}
