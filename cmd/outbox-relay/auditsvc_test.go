// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestAuditorsStopWhenTold: the broker audits startAuditors started have been stopped, and
// have ended, once the function it returned returns, while the process's context still
// runs: a run that fails after starting them (the HTTP address taken) leaves none running.
func TestAuditorsStopWhenTold(t *testing.T) {
	db := testenv.MySQL(t) // no stored-position journal: each auditor waits for it, looking again now and then
	cfg := config.Default()
	cfg.Audit.Enabled = true
	cfg.RocketMQ.NameServers = []string{"127.0.0.1:1"}
	d := &runDatabase{Database: config.Database{Name: "default", Tables: []string{"first", "second"}}, pool: db.DB,
		groups: []*relay.Group{nil, nil}} // the owner is asked once the audit can run only
	const auditorCode = "outbox-relay/internal/auditor."
	before := testenv.Goroutines(auditorCode)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	panel := &auditPanel{}
	stop := startAuditors(ctx, cfg, []*runDatabase{d}, nil, prometheus.NewRegistry(), zerolog.Nop(), panel)
	if n := len(panel.tables()); n != 2 {
		t.Fatalf("the dashboard's panel lists %d tables, want 2", n)
	}
	testenv.Eventually(t, 10*time.Second, "both auditors running", func() bool {
		return len(testenv.Goroutines(auditorCode)) >= len(before)+2
	})
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	testenv.Eventually(t, 10*time.Second, "the auditors stopped with ctx still running", func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	testenv.NoGoroutinesLeft(t, before, auditorCode)
}
