package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// benchOptions are the bench command's own flags; batch size and concurrency are the global
// --batch-size and --concurrency (relay.batch_size, relay.concurrency).
type benchOptions struct {
	rows      int
	bodyBytes int
	batchSend bool
	topic     string
}

func (a *app) newBenchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure relay throughput on this database and broker",
		Long: `Measure how fast the relay drains a backlog on your own hardware: create a temporary
table outbox_bench_<random> in the configured database (mysql.dsn), fill it with --rows
due rows, relay them all once with the configured batch size and concurrency, print the
rows/s, and drop the table.

The messages go to an in-process test broker (internal/rmqtest, in memory) unless
--nameservers is given on the command line: then they go to that RocketMQ, to topic
--topic, which must exist there or be auto-created. The configured tables are not touched.`,
		Example: `  outbox-relay bench --rows 100000
  outbox-relay bench --rows 1000000 --batch-size 2000 --concurrency 16
  outbox-relay bench --nameservers rocketmq:9876 --topic outbox_bench --batch-send=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.rows < 1 {
				return usageError("--rows: must be at least 1, got %d", o.rows)
			}
			if o.bodyBytes < 1 || o.bodyBytes > 4<<20 {
				return usageError("--body-bytes: must be between 1 and 4194304, got %d", o.bodyBytes)
			}
			if !cmd.Flags().Changed("batch-send") {
				o.batchSend = a.cfg.Relay.BatchSend
			}
			nameServers := []string(nil)
			if cmd.Flags().Changed("nameservers") {
				nameServers = a.cfg.RocketMQ.NameServers
			}
			return a.bench(cmd.Context(), o, nameServers)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.rows, "rows", 100000, "due rows to fill and relay")
	fs.IntVar(&o.bodyBytes, "body-bytes", 200, "bytes of each message body")
	fs.BoolVar(&o.batchSend, "batch-send", true, "send messages of one topic in batch requests (default: relay.batch_send)")
	fs.StringVar(&o.topic, "topic", "outbox_bench", "topic of the messages")
	return cmd
}

// bench runs the measure; nameServers nil means the in-process broker.
func (a *app) bench(ctx context.Context, o benchOptions, nameServers []string) error {
	useClientLogger(a.log)
	db, err := openMySQL(ctx, a.cfg.MySQL.DSN)
	if err != nil {
		return err
	}
	defer db.Close()

	brokerName := "RocketMQ at " + strings.Join(nameServers, ",")
	if nameServers == nil {
		broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
		if err != nil {
			return fmt.Errorf("start the in-process broker: %w", err)
		}
		defer broker.Close()
		nameServers = []string{broker.NameServerAddr()}
		brokerName = "in-process test broker (pass --nameservers for a real one)"
	}
	pub, err := relay.NewRocketMQPublisher(relay.RocketMQConfig{
		NameServers: nameServers, Group: a.cfg.RocketMQ.Group, SendTimeout: a.cfg.RocketMQ.SendTimeout,
		AccessKey: a.cfg.RocketMQ.AccessKey, SecretKey: a.cfg.RocketMQ.SecretKey,
	})
	if err != nil {
		return err
	}
	defer pub.Close()

	table := "outbox_bench_" + randomHex(4)
	if err := schema.Migrate(ctx, db, table); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	defer func() {
		// Drop the table even when ctx was cancelled (Ctrl-C).
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(dctx, "DROP TABLE IF EXISTS "+table); err != nil {
			a.log.Error().Err(err).Str("table", table).Msg("bench: drop the table by hand")
		}
	}()

	fmt.Fprintf(a.out, "outbox-relay bench: %d rows of %d bytes, batch size %d, concurrency %d, batch send %t\n",
		o.rows, o.bodyBytes, a.cfg.Relay.BatchSize, a.cfg.Relay.Concurrency, o.batchSend)
	fmt.Fprintf(a.out, "database %s, table %s (dropped at the end), broker: %s\n",
		config.RedactDSN(a.cfg.MySQL.DSN), table, brokerName)

	// Warm up the producer (route lookup, connection) so the drain measures steady state.
	if err := pub.Send(ctx, relay.Route{}, &relay.Message{MsgID: "bench-warm-up", Topic: o.topic, Body: []byte("warm-up")}); err != nil {
		return fmt.Errorf("send to topic %s: %w", o.topic, err)
	}

	start := time.Now()
	if err := benchFill(ctx, db, table, o); err != nil {
		return err
	}
	fillTook := time.Since(start)
	fmt.Fprintf(a.out, "fill:  %d rows in %s (%.0f rows/s, multi-row INSERT of 1000)\n",
		o.rows, fillTook.Round(time.Millisecond), float64(o.rows)/fillTook.Seconds())

	r, err := relay.New(db, nil, pub, relay.Config{
		Table: table, BatchSize: a.cfg.Relay.BatchSize, Concurrency: a.cfg.Relay.Concurrency,
		DisableBatchSend: !o.batchSend, MaxBodyBytes: max(a.cfg.Relay.MaxBodyBytes, o.bodyBytes),
	})
	if err != nil {
		return err
	}
	start = time.Now()
	st, err := r.DrainOnce(ctx, ctx)
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	fmt.Fprintf(a.out, "drain: %d rows sent in %s: %.0f rows/s (retried %d, dead %d)\n",
		st.Sent, took.Round(time.Millisecond), float64(st.Sent)/took.Seconds(), st.Retried, st.Dead)
	if st.Sent != o.rows {
		return fmt.Errorf("only %d of %d rows were sent (retried %d, dead %d): see the log", st.Sent, o.rows, st.Retried, st.Dead)
	}
	return nil
}

// benchFill inserts o.rows due rows with multi-row INSERTs of 1,000 rows.
func benchFill(ctx context.Context, db *sql.DB, table string, o benchOptions) error {
	const perStmt = 1000
	body := strings.Repeat("x", o.bodyBytes)
	prefix := "bench-" + randomHex(4) + "-"
	var q strings.Builder
	args := make([]any, 0, 3*perStmt)
	for done := 0; done < o.rows; {
		k := min(perStmt, o.rows-done)
		q.Reset()
		args = args[:0]
		q.WriteString("INSERT INTO " + table + " (msg_id, topic, tag, content) VALUES ")
		for i := 0; i < k; i++ {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, 'bench', ?)")
			args = append(args, prefix+strconv.Itoa(done+i), o.topic, body)
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("fill %s: %w", table, err)
		}
		done += k
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
