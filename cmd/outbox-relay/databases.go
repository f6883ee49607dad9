// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Retry schedule of a database that is not ready when the relay starts: its first retry
// after dbRetryFirst, doubling up to dbRetryMax.
const (
	dbRetryFirst = 2 * time.Second
	dbRetryMax   = time.Minute
)

// runDatabase is one configured database in a running relay: its pool, its relays (one per
// table) and, until they run, why they do not.
type runDatabase struct {
	config.Database
	// qualify prefixes table names with the database's name in /readyz and /healthz when
	// the configuration lists databases (the single-database form keeps bare table names).
	qualify bool
	pool    *sql.DB
	groups  []*relay.Group // one per table
	relays  []*relay.Relay // every group's, one per partition

	mu       sync.Mutex
	notReady error // nil once its relays run
}

// tableName names table of d in /readyz, /healthz and logs: shop-a/local_message, or the bare
// table in the single-database form.
func (d *runDatabase) tableName(table string) string {
	if d.qualify {
		return d.Name + "/" + table
	}
	return table
}

// why returns why the database's relays do not run yet, or nil once they do.
func (d *runDatabase) why() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.notReady
}

func (d *runDatabase) setWhy(err error) {
	d.mu.Lock()
	d.notReady = err
	d.mu.Unlock()
}

// newRunDatabases makes a pool per configured database; none connects yet. Close the pools
// with closeDatabases.
func newRunDatabases(cfg config.Config) ([]*runDatabase, error) {
	var out []*runDatabase
	for _, db := range cfg.EffectiveDatabases() {
		pool, err := mysqlPool(db.DSN)
		if err != nil {
			closeDatabases(out)
			return nil, fmt.Errorf("database %s: %w", db.Name, err)
		}
		// A failover moves the database: the pool's connections are dialled again within
		// these, whatever else finds out (docs/runbook.md, "MySQL failover").
		pool.SetConnMaxLifetime(cfg.MySQL.ConnMaxLifetime)
		pool.SetConnMaxIdleTime(cfg.MySQL.ConnMaxIdleTime)
		d := &runDatabase{Database: db, qualify: cfg.MultiDatabase(), pool: pool}
		d.setWhy(errors.New("not checked yet"))
		out = append(out, d)
	}
	return out, nil
}

func closeDatabases(dbs []*runDatabase) {
	for _, d := range dbs {
		d.pool.Close()
	}
}

// check pings the database and checks each of its tables for partitions partitions; an error
// says what is missing. Narrow columns are not fatal: they are logged as warnings, with the
// limit they put on writers.
func (d *runDatabase) check(ctx context.Context, partitions int, log zerolog.Logger) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.pool.PingContext(pctx); err != nil {
		return fmt.Errorf("connect to MySQL (%s): %w", config.RedactDSN(d.DSN), err)
	}
	for _, table := range d.Tables {
		problems, err := schema.CheckPartitioned(pctx, d.pool, table, partitions)
		if err != nil {
			return err
		}
		var fatal []schema.Problem
		for _, p := range problems {
			if p.Fatal() {
				fatal = append(fatal, p)
				continue
			}
			msg := "column narrower than the contract: longer values fail to insert (or are cut without strict sql_mode); `outbox-relay migrate` widens it"
			switch p.Kind {
			case "obsolete index":
				msg = "index the relay no longer uses: every write-back still moves the row's entry in it; `outbox-relay migrate` drops it online"
			case schema.MissingStoredLog:
				msg = "stored-position journal missing: broker positions are not recorded and the broker audit is off for this table; " +
					"`outbox-relay migrate` creates it (a new table: the outbox table is not locked)"
			}
			log.Warn().Str("table", table).Str("problem", p.String()).Msg(msg)
		}
		if len(fatal) > 0 {
			return fmt.Errorf("table %s is not ready (run `outbox-relay migrate`): %v", table, fatal)
		}
	}
	return nil
}

// checkAtStart checks every database once. With one database, a failure stops the start (as
// it always did). With several, the relay starts if at least one is ready; each one that is
// not is logged at error level and retried by runWhenReady (docs/decisions.md).
func checkAtStart(ctx context.Context, dbs []*runDatabase, partitions int, log zerolog.Logger) error {
	var errs []error
	for _, d := range dbs {
		err := d.check(ctx, partitions, log)
		if err != nil && len(dbs) == 1 {
			return err
		}
		if err != nil {
			err = fmt.Errorf("database %s (%s): %w", d.Name, d.Label(), err)
			log.Error().Err(err).Str("database_name", d.Name).Str("database", d.Label()).
				Msg("database not ready at start: its tables wait, the other databases are relayed; retrying")
			errs = append(errs, err)
		}
		d.setWhy(err)
	}
	if len(errs) == len(dbs) {
		return fmt.Errorf("no configured database is ready:\n%w", errors.Join(errs...))
	}
	return nil
}

// runWhenReady runs the database's relay groups, and its periodic purge when
// rc.PurgeRetention is set, until ctx ends; while the database is not ready (see
// checkAtStart) it retries it on a doubling interval, logging each failure.
func (d *runDatabase) runWhenReady(ctx context.Context, rc config.Relay, log zerolog.Logger) {
	log = log.With().Str("database_name", d.Name).Str("database", d.Label()).Logger()
	wait := dbRetryFirst
	for d.why() != nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := d.check(ctx, rc.Partitions, log)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			d.setWhy(err)
			log.Error().Err(err).Dur("next_retry_ms", min(2*wait, dbRetryMax)).Msg("database still not ready: its tables wait")
			wait = min(2*wait, dbRetryMax)
			continue
		}
		d.setWhy(nil)
		log.Info().Msg("database ready: relaying its tables")
	}
	var wg sync.WaitGroup
	if rc.PurgeRetention > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ops.PurgeLoop(ctx, d.pool, d.Tables, ops.PurgeOptions{OlderThan: rc.PurgeRetention}, rc.PurgeInterval, log)
		}()
	}
	for _, g := range d.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Run(ctx); err != nil {
				log.Error().Err(err).Msg("relay stopped")
			}
		}()
	}
	wg.Wait()
}
