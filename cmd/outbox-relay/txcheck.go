// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
)

// startCheckResponder starts the transactional check responder when
// rocketmq.transaction_check_groups lists groups (the configuration allows them with one
// database only), and returns its Stop; without groups it does nothing.
func startCheckResponder(ctx context.Context, cfg config.Config, d *runDatabase, rdb redis.UniversalClient, reg prometheus.Registerer, log zerolog.Logger) (func(), error) {
	groups := cfg.RocketMQ.TransactionCheckGroups
	if len(groups) == 0 {
		return func() {}, nil
	}
	var release func(context.Context, string)
	if cfg.Relay.Nudge {
		n := redisnudge.New(rdb).In(d.Label())
		release = func(ctx context.Context, table string) { _ = n.Nudge(ctx, table) }
	}
	tlsCfg, err := cfg.RocketMQ.TLS.ClientConfig()
	if err != nil {
		return nil, err
	}
	r, err := txcheck.New(txcheck.Config{
		NameServers: cfg.RocketMQ.NameServers, Groups: groups, DB: d.pool, Tables: d.Tables, TLS: tlsCfg,
		AccessKey: cfg.RocketMQ.AccessKey, SecretKey: cfg.RocketMQ.SecretKey,
		Secrets: cfg.RocketMQ.TransactionCheckSecrets, Fence: cfg.RocketMQ.TransactionCheckFence,
		Database: d.Label(), Release: release, Logger: &log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	purge := startstop.New(func(ctx context.Context) { purgeTombstones(ctx, d.pool, d.Tables, log) })
	if err := startstop.StartAll(ctx, r, purge); err != nil {
		return nil, err
	}
	log.Info().Strs("groups", groups).Msg("answering transactional check-backs")
	return func() { startstop.StopAll(purge, r) }, nil
}

// tombstonePurgeInterval is the time between purges of old tombstones.
const tombstonePurgeInterval = time.Hour

// purgeTombstones deletes the tombstones older than txcheck.TombstoneRetention from every
// table now and then every tombstonePurgeInterval, until ctx ends.
func purgeTombstones(ctx context.Context, db *sql.DB, tables []string, log zerolog.Logger) {
	t := time.NewTicker(tombstonePurgeInterval)
	defer t.Stop()
	for {
		for _, table := range tables {
			n, err := txcheck.PurgeTombstones(ctx, db, table, txcheck.TombstoneRetention)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				log.Warn().Err(err).Str("table", table).Msg("purge of old tombstones failed; retried in an hour")
			case n > 0:
				log.Info().Str("table", table).Int64("deleted", n).Msg("purged old tombstones of transactional checks")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
