// SPDX-License-Identifier: Apache-2.0

package tlsbridge_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
	"github.com/outbox-relay/outbox-relay/internal/tlsbridge"
)

// TestApacheRocketMQVerifiedTLS runs against Apache RocketMQ 5.3.3 serving TLS only
// (tls.server.mode=enforcing) with a certificate for rocketmq.test, as scripts/rocketmq-tls.sh
// starts it: OUTBOX_TEST_ROCKETMQ_TLS_NAMESRV is its name server, OUTBOX_TEST_ROCKETMQ_TLS_CA
// the CA's PEM file, and the topic TlsOrders exists. A wrong CA or name is refused; the right
// ones deliver through the bridge, and the responder's own connections verify the same way.
func TestApacheRocketMQVerifiedTLS(t *testing.T) {
	ns, caFile := os.Getenv("OUTBOX_TEST_ROCKETMQ_TLS_NAMESRV"), os.Getenv("OUTBOX_TEST_ROCKETMQ_TLS_CA")
	if ns == "" || caFile == "" {
		t.Skip("OUTBOX_TEST_ROCKETMQ_TLS_NAMESRV and OUTBOX_TEST_ROCKETMQ_TLS_CA not set (scripts/rocketmq-tls.sh start)")
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caFile)
	}
	ctx := context.Background()
	msgID := func(s string) string { return s + "-" + time.Now().Format("150405.000000") }
	if err := send(t, []string{ns}, false, msgID("plain")); err == nil {
		t.Fatal("a plain TCP send succeeded: the server does not enforce TLS")
	}
	for _, bad := range []*tls.Config{
		{RootCAs: testcerts.NewCA(t, "other").Pool(), ServerName: serverName},
		{RootCAs: roots, ServerName: "other.test"},
	} {
		b, err := tlsbridge.Start(tlsbridge.Config{TLS: bad, DialTimeout: 2 * time.Second}, []string{ns})
		if err != nil {
			t.Fatal(err)
		}
		var ve *tls.CertificateVerificationError
		if err := b.Verify(ctx); !errors.As(err, &ve) {
			t.Fatalf("Verify with %s = %v; want a certificate verification error", bad.ServerName, err)
		}
		if err := send(t, b.NameServers(), false, msgID("refused")); err == nil {
			t.Fatalf("a send through a refused certificate (%s) succeeded", bad.ServerName)
		}
		b.Close()
	}
	good := &tls.Config{RootCAs: roots, ServerName: serverName}
	b, err := tlsbridge.Start(tlsbridge.Config{TLS: good}, []string{ns})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Verify(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := send(t, b.NameServers(), false, msgID("verified")); err != nil {
			t.Fatalf("send %d through the bridge: %v", i, err)
		}
	}
	if err := send(t, []string{ns}, true, msgID("insecure")); err != nil {
		t.Fatalf("send with the client's unverified TLS: %v", err)
	}
	masters, err := remoting.Masters(ctx, ns, remoting.WithTLSConfig(good))
	if err != nil || len(masters) == 0 {
		t.Fatalf("Masters over verified TLS = %v, %v", masters, err)
	}
	for _, addr := range masters {
		c, err := remoting.Dial(ctx, addr, nil, remoting.WithTLSConfig(good))
		if err != nil {
			t.Fatalf("the responder's dial of %s: %v", addr, err)
		}
		resp, err := c.Invoke(ctx, remoting.HeartBeat, nil, []byte(`{"clientID":"outbox-tls-test","producerDataSet":[{"groupName":"outbox-tls-test"}],"consumerDataSet":[]}`))
		c.Close()
		if err != nil || resp.Code != 0 {
			t.Fatalf("a heartbeat over verified TLS to %s: %+v, %v", addr, resp, err)
		}
	}
}
