// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/x509"
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testcerts"
)

// A verified TLS setting loads its CA, server name and client certificate into the client
// configuration, with the check groups allowed beside it; without ca_file the system's CAs
// verify. The insecure setting verifies nothing.
func TestRocketMQTLSVerifiedConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testcerts.NewCA(t, "mq-ca")
	caFile := ca.WriteCA(t, dir)
	certFile, keyFile := testcerts.WriteKeyPair(t, dir, "relay", ca.Issue(t, "relay.client"))
	c, err := load(t, fmt.Sprintf("rocketmq: {transaction_check_groups: [tx], transaction_check_secrets: [0123456789abcdef], tls: {enable: true, ca_file: %s, server_name: mq.example, cert_file: %s, key_file: %s}}", caFile, certFile, keyFile))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := c.RocketMQ.TLS.ClientConfig()
	if err != nil || !c.RocketMQ.TLS.Verified() {
		t.Fatalf("ClientConfig = %v; Verified = %v", err, c.RocketMQ.TLS.Verified())
	}
	if cfg.InsecureSkipVerify || cfg.ServerName != "mq.example" || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("ClientConfig = %+v; want the CA, the name and the client certificate", cfg)
	}
	leaf, _ := x509.ParseCertificate(ca.Issue(t, "mq.example").Certificate[0])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.RootCAs, DNSName: cfg.ServerName}); err != nil {
		t.Fatalf("the loaded CA does not verify its server: %v", err)
	}

	c, err = load(t, "rocketmq: {tls: {enable: true}}")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := c.RocketMQ.TLS.ClientConfig(); cfg == nil || cfg.InsecureSkipVerify || cfg.RootCAs != nil {
		t.Fatalf("enable alone = %+v; want verification by the system's CAs", cfg)
	}
	c, err = load(t, "rocketmq: {tls: {enable: true, insecure_skip_verify: true}}")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, _ := c.RocketMQ.TLS.ClientConfig(); cfg == nil || !cfg.InsecureSkipVerify || c.RocketMQ.TLS.Verified() {
		t.Fatalf("insecure_skip_verify = %+v; want no verification", cfg)
	}
}
