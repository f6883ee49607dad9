// SPDX-License-Identifier: Apache-2.0

package remoting_test

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
)

// WithTLSConfig verifies the server: a name server or broker whose certificate is not of the
// CA, or not for the name, is refused at the handshake; the right CA and name are answered.
func TestTLSConfigVerifiesTheServer(t *testing.T) {
	ca, other := testcerts.NewCA(t, "right"), testcerts.NewCA(t, "other")
	srv, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {},
		TLS: &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, "rocketmq.test")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	for _, bad := range []*tls.Config{
		{RootCAs: other.Pool(), ServerName: "rocketmq.test"},
		{RootCAs: ca.Pool(), ServerName: "other.test"},
	} {
		var ve *tls.CertificateVerificationError
		if _, err := remoting.Masters(ctx, srv.NameServerAddr(), remoting.WithTLSConfig(bad)); !errors.As(err, &ve) {
			t.Fatalf("Masters with %v = %v; want a certificate verification error", bad.ServerName, err)
		}
		if _, err := remoting.Dial(ctx, srv.BrokerAddr(), nil, remoting.WithTLSConfig(bad)); !errors.As(err, &ve) {
			t.Fatalf("Dial with %v = %v; want a certificate verification error", bad.ServerName, err)
		}
	}
	good := remoting.WithTLSConfig(&tls.Config{RootCAs: ca.Pool(), ServerName: "rocketmq.test"})
	m, err := remoting.Masters(ctx, srv.NameServerAddr(), good)
	if err != nil || m["broker-a"] != srv.BrokerAddr() {
		t.Fatalf("Masters = %v, %v", m, err)
	}
	c, err := remoting.Dial(ctx, srv.BrokerAddr(), nil, good)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Invoke(ctx, remoting.HeartBeat, nil, []byte(`{"clientID":"tls-test","producerDataSet":[],"consumerDataSet":[]}`)); err != nil {
		t.Fatalf("a request over verified TLS: %v", err)
	}
	if n, err := remoting.LiveBrokers(ctx, srv.NameServerAddr(), remoting.WithTLS(true)); err != nil || n != 1 {
		t.Fatalf("LiveBrokers with unverified TLS chosen = %d, %v", n, err)
	}
}
