// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/drainbench"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

func (a *app) newBenchCmd() *cobra.Command {
	var o drainbench.Options
	var dbName string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure relay throughput on this database and broker",
		Long: `Measure how fast the relay drains a backlog on your own hardware: create a temporary
table outbox_bench_<random> (and its stored-position journal) in the configured database
(mysql.dsn), fill it with --rows due rows, relay them all once with the configured batch
size and concurrency to the configured RocketMQ (rocketmq.nameservers), topic --topic,
which must exist there or be auto-created, print the rows/s, and drop both tables. The
configured tables are not touched. With a databases list, choose the database with
--database. --positions appends where the broker stored each row to the journal, as the
broker audit (audit.enabled) does: run it with and without to see what that costs.

To measure without a RocketMQ (the database's and the client's share, against an in-memory
test broker), run the development tool from a checkout: make bench-local.`,
		Example: `  outbox-relay bench --rows 100000
  outbox-relay bench --rows 1000000 --batch-size 2000 --concurrency 16
  outbox-relay bench --nameservers rocketmq:9876 --topic outbox_bench --batch-send=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("batch-send") {
				o.BatchSend = a.cfg.Relay.BatchSend
			}
			if err := o.Validate(); err != nil {
				return usageError("%v", err)
			}
			dbs, err := a.selectDatabases(dbName)
			if err != nil {
				return err
			}
			if len(dbs) > 1 {
				return usageError("bench: several databases are configured: choose one with --database")
			}
			return a.bench(cmd.Context(), dbs[0], o)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.Rows, "rows", 100000, "due rows to fill and relay")
	fs.IntVar(&o.BodyBytes, "body-bytes", 200, "bytes of each message body")
	fs.BoolVar(&o.BatchSend, "batch-send", true, "send messages of one topic in batch requests (default: relay.batch_send)")
	fs.BoolVar(&o.RecordPositions, "positions", false, "append where the broker stored each row to the stored-position journal, as with audit.enabled")
	fs.StringVar(&o.Topic, "topic", "outbox_bench", "topic of the messages")
	addDatabaseFlag(cmd, &dbName)
	return cmd
}

// bench runs the measure against database d and the configured broker.
func (a *app) bench(ctx context.Context, d config.Database, o drainbench.Options) error {
	useClientLogger(a.log)
	db, err := openMySQL(ctx, d.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	link, err := openRocketMQ(ctx, a.cfg.RocketMQ, a.log)
	if err != nil {
		return err
	}
	defer link.close()
	pub, err := rocketmq.NewPublisher(rocketmqConfig(a.cfg, link, a.log, nil))
	if err != nil {
		return err
	}
	defer pub.Close()
	o.BatchSize, o.Concurrency, o.MaxBodyBytes = a.cfg.Relay.BatchSize, a.cfg.Relay.Concurrency, a.cfg.Relay.MaxBodyBytes
	o.Database = config.RedactDSN(d.DSN)
	o.Broker = "RocketMQ at " + strings.Join(a.cfg.RocketMQ.NameServers, ",")
	return drainbench.Run(ctx, db, pub, o, a.out)
}
