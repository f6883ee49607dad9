// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
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

// unaskableBroker starts rmqtest with topic orders routed to a broker that does not answer,
// and configures the relay to send to it.
func unaskableBroker(t *testing.T) *rmqtest.Server {
	t.Helper()
	srv, err := rmqtest.Start(rmqtest.Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.CreateTopic("orders", 2)
	srv.StopBroker()
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", srv.NameServerAddr())
	t.Setenv("OUTBOX_ROUTES", `[{"topic":"orders"}]`)
	return srv
}

// A broker that the name server still routes but that does not answer: check says the audit
// cannot ask it, why, and exits 1 although every topic exists.
func TestCheckSaysTheAuditCannotAsk(t *testing.T) {
	srv := unaskableBroker(t)
	// With the audit turned off, check says so and does not ask.
	t.Setenv("OUTBOX_AUDIT_ENABLED", "false")
	r := cli(t, "", false, "check", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x", "--timeout", "5s")
	if r.code != 0 || !strings.Contains(r.out, "broker audit: OFF (audit.enabled=false)") {
		t.Fatalf("audit off: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
	}
	t.Setenv("OUTBOX_AUDIT_ENABLED", "true")
	r = cli(t, "", false, "check", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x", "--timeout", "5s")
	if r.code != exitRuntime || !strings.Contains(r.out, "broker audit: OFF: the brokers cannot be asked") ||
		!strings.Contains(r.out, "broker broker-a at "+srv.BrokerAddr()) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
	}
}

// check, the audit service at start and `outbox-relay audit` give one verdict, word for word,
// on a deployment whose broker cannot be asked (the name server still routes the topic to a
// broker that does not answer): the reason check prints is the one the service logs and
// shows on the dashboard, and the one `audit` fails with.
func TestCheckAndTheAuditServiceSayTheSame(t *testing.T) {
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	ddl, err := schema.StoredLogDDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	srv := unaskableBroker(t)
	t.Setenv("OUTBOX_AUDIT_ENABLED", "true")

	r := cli(t, "", false, "check", "--mysql-dsn="+db.DSN, "--timeout", "5s")
	_, said, found := strings.Cut(r.out, "broker audit: OFF: ")
	said, _, _ = strings.Cut(said, "\n")
	t.Log("check says: " + said)
	if r.code != exitRuntime || !found || !strings.Contains(said, "broker broker-a at "+srv.BrokerAddr()) {
		t.Fatalf("check: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.errOut)
	}

	// The audit service, started as `run` starts it.
	cfg := config.Default()
	cfg.RocketMQ.NameServers = []string{srv.NameServerAddr()}
	cfg.Routes = []config.Route{{Topic: "orders", Tag: "*"}}
	cfg.Audit.Enabled = true
	router, err := routerFrom(cfg.Routes)
	if err != nil {
		t.Fatal(err)
	}
	d := &runDatabase{Database: config.Database{Name: "shop", DSN: db.DSN, Tables: []string{"local_message"}},
		pool: db.DB, groups: []*relay.Group{nil}}
	logs := &testenv.SyncBuffer{}
	panel := &auditPanel{}
	ctx, cancel := context.WithCancel(context.Background())
	wait := startAuditors(ctx, cfg, []*runDatabase{d}, router, prometheus.NewRegistry(), zerolog.New(logs), panel)
	defer func() { cancel(); wait() }()
	if len(panel.entries) != 1 || panel.entries[0].a == nil {
		t.Fatalf("the audit service made no auditor: %+v\n%s", panel.entries, logs.String())
	}
	a := panel.entries[0].a
	testenv.Eventually(t, 30*time.Second, "the audit service's verdict, logged", func() bool {
		return a.Status() != nil && strings.Contains(logs.String(), "broker audit OFF")
	})
	if got := a.Status().Error(); got != said {
		t.Errorf("the audit service (and the dashboard) says\n  %s\ncheck says\n  %s", got, said)
	}
	logged := ""
	for _, line := range strings.Split(logs.String(), "\n") {
		var e struct{ Message, Error string }
		if json.Unmarshal([]byte(line), &e) == nil && strings.HasPrefix(e.Message, "broker audit OFF") {
			logged = e.Error
		}
	}
	if logged != said {
		t.Errorf("the audit service logs\n  %s\ncheck says\n  %s", logged, said)
	}

	r = cli(t, "", false, "audit", "--mysql-dsn="+db.DSN, "--since", "1h")
	if r.code != exitRuntime || !strings.Contains(r.errOut, "audit: "+said) {
		t.Errorf("audit: exit %d, want %d and %q\nstderr:\n%s", r.code, exitRuntime, said, r.errOut)
	}
}
