// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/relay"
)

// newAuditor returns the broker audit of one table; owner says when this process runs it.
func newAuditor(cfg config.Config, d *runDatabase, table string, router relay.Router, m *auditor.Metrics, owner func() bool, log zerolog.Logger) (*auditor.Auditor, error) {
	return auditor.New(d.pool, brokeraudit.ForConfig(cfg), auditor.Config{
		Database: d.Label(), Table: table, MinAge: cfg.Audit.MinAge, MaxAge: cfg.Audit.MaxAge,
		Rate: cfg.Audit.Rate, Batch: cfg.Audit.BatchSize, Namespace: cfg.RocketMQ.Namespace,
		Ordered: orderedBy(router), Owner: owner, Log: log, Metrics: m,
	})
}

// orderedBy says whether a topic and tag go by an ordered route.
func orderedBy(router relay.Router) func(topic, tag string) bool {
	return func(topic, tag string) bool {
		if router == nil {
			return false
		}
		r, _ := router.Route(topic, tag)
		return r.Ordered
	}
}

// startAuditors starts the broker audit of every table of dbs, each a service
// (internal/startstop) running on the process holding the table's partition 0 (the whole
// table's lock with one partition) until ctx ends; the returned function stops them and
// waits for them. With audit.enabled off it logs so and starts nothing. Each table's
// auditor, or why it has none, goes to panel (the dashboard's).
func startAuditors(ctx context.Context, cfg config.Config, dbs []*runDatabase, router relay.Router, reg prometheus.Registerer, log zerolog.Logger, panel *auditPanel) (stop func()) {
	var services []startstop.Service
	stop = func() { startstop.StopAll(services...) }
	if !cfg.Audit.Enabled {
		log.Info().Msg("broker audit off (audit.enabled=false): acknowledged messages the broker loses are not looked for")
		for _, d := range dbs {
			for _, table := range d.Tables {
				panel.add(auditEntry{database: d.Name, table: table, off: "disabled: audit.enabled=false"})
			}
		}
		return stop
	}
	m := auditor.NewMetrics(reg)
	for _, d := range dbs {
		for i, table := range d.Tables {
			a, err := newAuditor(cfg, d, table, router, m, auditor.OwnerOf(d.groups[i]), log)
			if err != nil {
				log.Error().Err(err).Str("table", table).Msg("broker audit OFF")
				panel.add(auditEntry{database: d.Name, table: table, off: err.Error()})
				continue
			}
			panel.add(auditEntry{database: d.Name, table: table, a: a})
			services = append(services, startstop.New(func(ctx context.Context) { _ = a.Run(ctx) }))
		}
	}
	_ = startstop.StartAll(ctx, services...) // a Func never fails to start
	return stop
}
