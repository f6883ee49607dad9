// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
)

// The relay refuses to start when a name server's certificate fails verification (wrong CA,
// wrong name), saying so; with the right CA and name the client is given the bridge's
// loopback name servers and no TLS of its own; insecure_skip_verify keeps the client's TLS.
func TestOpenRocketMQVerifiesAtStart(t *testing.T) {
	dir := t.TempDir()
	ca, other := testcerts.NewCA(t, "right"), testcerts.NewCA(t, "other")
	srv := tlsBroker(t, ca)
	mq := config.RocketMQ{NameServers: []string{srv.NameServerAddr()},
		TLS: config.RocketMQTLS{Enable: true, CAFile: other.WriteCA(t, dir), ServerName: "rocketmq.test"}}
	ctx := context.Background()
	if _, err := openRocketMQ(ctx, mq, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("wrong CA: %v", err)
	}
	mq.TLS.CAFile, mq.TLS.ServerName = ca.WriteCA(t, dir), "other.test"
	if _, err := openRocketMQ(ctx, mq, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "not other.test") {
		t.Fatalf("wrong name: %v", err)
	}
	mq.TLS.ServerName = "rocketmq.test"
	link, err := openRocketMQ(ctx, mq, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer link.close()
	if link.clientTLS || len(link.nameServers) != 1 || !strings.HasPrefix(link.nameServers[0], "127.0.0.1:") || link.nameServers[0] == srv.NameServerAddr() {
		t.Fatalf("link = %+v; want the bridge's name server and no client TLS", link)
	}
	insecure := config.RocketMQ{NameServers: mq.NameServers, TLS: config.RocketMQTLS{Enable: true, InsecureSkipVerify: true}}
	if link, err := openRocketMQ(ctx, insecure, zerolog.Nop()); err != nil || !link.clientTLS || link.nameServers[0] != srv.NameServerAddr() {
		t.Fatalf("insecure: %+v, %v", link, err)
	}
}

// tlsBroker starts an rmqtest broker whose name server and broker serve TLS with a
// certificate of ca for rocketmq.test, stopped when the test ends.
func tlsBroker(t *testing.T, ca *testcerts.CA) *rmqtest.Server {
	t.Helper()
	srv, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {},
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "rocketmq.test")}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}
