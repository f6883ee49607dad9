// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// check says the broker audit can ask a RocketMQ 5.3.3 broker reached directly, and exits 0.
func TestCheckSaysTheAuditCanAsk(t *testing.T) {
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", testenv.RocketMQ(t))
	t.Setenv("OUTBOX_ROUTES", `[{"topic":"orders"}]`) // created by scripts/rocketmq.sh start
	t.Setenv("OUTBOX_AUDIT_ENABLED", "true")
	r := cli(t, "", false, "check", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x")
	if r.code != 0 || !strings.Contains(r.out, "broker audit: ok") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
	}
}

// A broker that the name server still routes but that does not answer: check says the audit
// cannot ask it, why, and exits 1 although every topic exists.
func TestCheckSaysTheAuditCannotAsk(t *testing.T) {
	srv, err := rmqtest.Start(rmqtest.Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.CreateTopic("orders", 2)
	srv.StopBroker()
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", srv.NameServerAddr())
	t.Setenv("OUTBOX_ROUTES", `[{"topic":"orders"}]`)
	// The audit is off by default: check says so and does not ask.
	r := cli(t, "", false, "check", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x", "--timeout", "5s")
	if r.code != 0 || !strings.Contains(r.out, "broker audit: OFF (audit.enabled=false)") {
		t.Fatalf("audit off: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
	}
	t.Setenv("OUTBOX_AUDIT_ENABLED", "true")
	r = cli(t, "", false, "check", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x", "--timeout", "5s")
	if r.code != exitRuntime || !strings.Contains(r.out, "broker audit: cannot ask the brokers") ||
		!strings.Contains(r.out, "broker broker-a at "+srv.BrokerAddr()) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
	}
}
