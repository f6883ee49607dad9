// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// replayFlags are the replay command's selection and pacing.
type replayFlags struct {
	since, until, file   string
	f                    ops.ReplayFilter
	msgIDs               []string
	after                int64
	rate                 float64
	burst, batch         int
	execute, yes, asJSON bool
	dbName               string
}

func (a *app) newReplayCmd() *cobra.Command {
	var rf replayFlags
	cmd := &cobra.Command{
		Use:   "replay [MSG_ID ...]",
		Short: "Publish sent messages again (a dry run unless --execute)",
		Long: `Publish sent rows again, for a consumer restored from a backup or a new consumer group.
Rows are chosen by --since/--until (sent_time), --topic, --tag, --key (one key of msg_keys),
--sharding-key, --from-id/--to-id, and msg_ids (arguments or --msg-ids-file, one a line, "-"
for stdin); conditions combine with AND. Only sent rows (status 2) are chosen; handed rows
(status 4) too with --include-handed.

Without --execute (or --yes) it is a dry run: it counts the rows and sends nothing. With it,
it counts, then sends each row's message as the relay sent it (the same OUTBOX_MSG_ID, keys,
tag, sharding key and route) with the property OUTBOX_REPLAY = "RUN_ID TIME", at most --rate
messages a second, reading the table in pages by id. No row is changed. It prints a progress
line per page and a final count; a stopped run prints the id to resume after (--after-id).
One table at a time: with several tables, name it with --table (and --database).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runReplay(cmd.Context(), cmd.OutOrStdout(), &rf, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&rf.since, "since", "", "sent at or after this time (RFC 3339, e.g. 2026-11-27T10:00:00Z, or a duration ago, e.g. 24h)")
	fl.StringVar(&rf.until, "until", "", "sent before this time (same forms as --since)")
	fl.StringVar(&rf.f.Topic, "topic", "", "this topic only")
	fl.StringVar(&rf.f.Tag, "tag", "", "this tag only")
	fl.StringVar(&rf.f.Key, "key", "", "rows with this key among their msg_keys (or this msg_id, for rows without keys)")
	fl.StringVar(&rf.f.ShardingKey, "sharding-key", "", "rows of this sharding_key only")
	fl.Int64Var(&rf.f.FromID, "from-id", 0, "lowest id (included)")
	fl.Int64Var(&rf.f.ToID, "to-id", 0, "highest id (included)")
	fl.StringArrayVar(&rf.msgIDs, "msg-id", nil, "this msg_id (repeatable; also as arguments)")
	fl.StringVar(&rf.file, "msg-ids-file", "", `file of msg_ids, one a line ("-": stdin)`)
	fl.BoolVar(&rf.f.IncludeHanded, "include-handed", false, "also replay handed rows (status 4), timed by when they were handed")
	fl.Int64Var(&rf.after, "after-id", 0, "resume a stopped run: only rows with a higher id")
	fl.Float64Var(&rf.rate, "rate", replay.DefaultRate, "most messages sent a second")
	fl.IntVar(&rf.burst, "burst", 0, "most messages sent at once (default: --batch)")
	fl.IntVar(&rf.batch, "batch", replay.DefaultBatch, "most messages of one request")
	fl.BoolVar(&rf.execute, "execute", false, "send (without it: count only)")
	fl.BoolVarP(&rf.yes, "yes", "y", false, "same as --execute")
	fl.BoolVar(&rf.asJSON, "json", false, "print the result as JSON")
	addDatabaseFlag(cmd, &rf.dbName)
	return cmd
}

// filter completes rf.f from the flags and arguments, with now for durations ago.
func (rf *replayFlags) filter(in io.Reader, args []string, now time.Time) (ops.ReplayFilter, error) {
	f := rf.f
	var err error
	if f.SentFrom, err = parseWhen("--since", rf.since, now); err != nil {
		return f, err
	}
	if f.SentTo, err = parseWhen("--until", rf.until, now); err != nil {
		return f, err
	}
	ids := append(append([]string{}, rf.msgIDs...), args...)
	if rf.file != "" {
		more, err := readMsgIDs(rf.file, in)
		if err != nil {
			return f, err
		}
		if len(more) == 0 {
			return f, usageError("replay: %s holds no msg_id", rf.file)
		}
		ids = append(ids, more...)
	}
	if len(ids) > 0 {
		f.MsgIDs = ids
	}
	if rf.rate <= 0 || rf.batch < 1 || rf.burst < 0 {
		return f, usageError("replay: --rate and --batch must be positive")
	}
	if err := f.Check(); err != nil {
		return f, usageError("replay: %v", err)
	}
	return f, nil
}

// parseWhen reads a time as RFC 3339 or as a duration before now; "" is no bound.
func parseWhen(flag, s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError("replay: %s %q: want RFC 3339 (2026-11-27T10:00:00Z) or a duration ago (24h)", flag, s)
}

// readMsgIDs reads one msg_id a line from name ("-": in); blank lines and # comments are skipped.
func readMsgIDs(name string, in io.Reader) ([]string, error) {
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, usageError("replay: --msg-ids-file: %v", err)
		}
		defer f.Close()
		in = f
	}
	var ids []string
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			ids = append(ids, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, usageError("replay: read %s: %v", name, err)
	}
	return ids, nil
}

// replayTable is the one table a replay acts on, named by --database and --table when the
// configuration has several.
func (a *app) replayTable(dbName string) (config.Database, string, error) {
	dbs, err := a.selectDatabases(dbName)
	if err != nil {
		return config.Database{}, "", err
	}
	if len(dbs) != 1 || len(dbs[0].Tables) != 1 {
		return config.Database{}, "", usageError("replay: acts on one table: name it with --table (and --database with a databases list)")
	}
	return dbs[0], dbs[0].Tables[0], nil
}

func (a *app) runReplay(ctx context.Context, out io.Writer, rf *replayFlags, args []string) error {
	f, err := rf.filter(a.in, args, time.Now())
	if err != nil {
		return err
	}
	d, table, err := a.replayTable(rf.dbName)
	if err != nil {
		return err
	}
	db, err := openMySQL(ctx, d.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	rc := replay.Config{DB: db, Table: table, Filter: f, After: rf.after, Rate: rf.rate, Burst: rf.burst, Batch: rf.batch,
		MaxBodyBytes: a.cfg.Relay.MaxBodyBytes, UnroutedDead: a.cfg.Relay.Unrouted == config.UnroutedDead, RunID: replay.NewRunID()}
	n, through, err := replay.Count(ctx, rc)
	if err != nil {
		return err
	}
	rc.Filter.ToID = through // the run sends what was counted, not rows sent since
	where := table + " on " + d.Label()
	if !rf.execute && !rf.yes {
		fmt.Fprintf(out, "dry run: would replay %d sent row(s) of %s at %g/s; nothing sent (add --execute to send)\n", n, where, rc.Rate)
		return nil
	}
	fmt.Fprintf(out, "replay %s: %d row(s) of %s at %g/s\n", rc.RunID, n, where, rc.Rate)
	if rc.Router, err = routerFrom(a.cfg.Routes); err != nil {
		return err
	}
	link, err := openRocketMQ(ctx, a.cfg.RocketMQ, a.log)
	if err != nil {
		return err
	}
	defer link.close()
	pub, err := rocketmq.NewPublisher(rocketmqConfig(a.cfg, link, a.log, relay.NewMetricsWith(prometheus.NewRegistry(), relay.MetricsOptions{})))
	if err != nil {
		return err
	}
	defer pub.Close()
	rc.Publisher, rc.Progress = pub, out
	res, err := replay.Run(ctx, rc)
	a.log.Info().Str("run_id", res.RunID).Str("table", table).Int64("sent", res.Sent).Int64("skipped", res.Skipped).
		Int64("last_id", res.LastID).Err(err).Msg("replay")
	for _, s := range res.Skips {
		fmt.Fprintf(out, "skipped %s\n", s)
	}
	if rf.asJSON {
		_ = writeJSON(out, res)
	}
	fmt.Fprintf(out, "replay %s: sent %d of %d counted, skipped %d, in %s (%.0f/s); last id %d\n",
		res.RunID, res.Sent, n, res.Skipped, res.Elapsed.Round(time.Millisecond), float64(res.Sent)/max(res.Elapsed.Seconds(), 1e-9), res.LastID)
	if err != nil {
		return fmt.Errorf("%w\nresume with: outbox-relay replay ... --execute --after-id %d", err, res.LastID)
	}
	return nil
}
