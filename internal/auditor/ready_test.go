// SPDX-License-Identifier: Apache-2.0

package auditor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// The audit never passes silently: on a table without its stored-position journal, and with brokers
// that cannot be asked, Run logs that the audit is off and why, and Status says so; while
// another process owns the table it checks nothing.
func TestAuditSaysWhyItIsOff(t *testing.T) {
	g := newRig(t)
	ctx := context.Background()
	runFor := func(t *testing.T, a *auditor.Auditor) {
		t.Helper()
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = a.Run(rctx) }()
		testenv.Eventually(t, 10*time.Second, "a status", func() bool { return a.Status() != nil })
		cancel()
		<-done
	}
	logs := &testenv.SyncBuffer{}
	cfg := auditor.Config{Database: "test", Table: "local_message", Log: zerolog.New(logs),
		Sleep: func(ctx context.Context, _ time.Duration) bool { <-ctx.Done(); return false }}

	unreachable := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{"127.0.0.1:1"}, Timeout: time.Second})
	a, err := auditor.New(g.db.DB, unreachable, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runFor(t, a)
	if err := a.Status(); !strings.Contains(err.Error(), "cannot be asked") || !strings.Contains(logs.String(), "broker audit OFF") {
		t.Errorf("unreachable brokers: status %v; log %s", err, logs.String())
	}

	if _, err := g.db.Exec("DROP TABLE local_message_stored"); err != nil {
		t.Fatal(err)
	}
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{g.broker.NameServerAddr()}})
	if a, err = auditor.New(g.db.DB, lookup, cfg); err != nil {
		t.Fatal(err)
	}
	runFor(t, a)
	if err := a.Status(); err == nil || !strings.Contains(err.Error(), "run `outbox-relay migrate` to create local_message_stored") {
		t.Errorf("table without its journal: status %v", err)
	}
}
