// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestDefaultConfigRecordsPositionsAndAudits: with the default configuration (nothing set
// about the audit) the relay of a migrated table appends every sent row's position to the
// stored-position journal, and the broker audit is started for the table, not turned off
// by configuration.
func TestDefaultConfigRecordsPositionsAndAudits(t *testing.T) {
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if !cfg.Audit.Enabled {
		t.Fatal("audit.enabled is off by default")
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	dbc := config.Database{Name: "default", Tables: []string{"local_message"}}
	r, err := relay.New(db.DB, nil, pub, tableRelayConfig(cfg, dbc, "local_message", relayDeps{log: zerolog.Nop()}))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := db.Exec(schema.InsertSQL, fmt.Sprintf("d%02d", i), "events", "", "{}", ""); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := r.DrainOnce(ctx); err != nil || st.Sent != 40 {
		t.Fatalf("drain: %+v, %v", st, err)
	}
	var recorded int
	if err := db.QueryRow("SELECT COALESCE(SUM(row_count), 0) FROM local_message_stored").Scan(&recorded); err != nil || recorded != 40 {
		t.Fatalf("rows in the journal after a drain with the default configuration: %d, %v; want 40", recorded, err)
	}

	cfg.RocketMQ.NameServers = []string{broker.NameServerAddr()}
	d := &runDatabase{Database: dbc, pool: db.DB, groups: []*relay.Group{nil}}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	panel := &auditPanel{}
	stop := startAuditors(actx, cfg, []*runDatabase{d}, nil, prometheus.NewRegistry(), zerolog.Nop(), panel)
	defer stop()
	tables := panel.tables()
	if len(tables) != 1 || tables[0].Why == "disabled: audit.enabled=false" {
		t.Fatalf("the audit with the default configuration: %+v; want it started for local_message", tables)
	}
}
