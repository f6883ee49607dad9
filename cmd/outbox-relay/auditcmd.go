// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
)

func (a *app) newAuditCmd() *cobra.Command {
	var since, until, topic, dbName string
	var repair, all bool
	cmd := &cobra.Command{
		Use:   "audit --since DURATION|TIME",
		Short: "Check sent rows against the broker; --repair sends again those it lost",
		Long: `Check the sent rows of a time range whose positions the relay recorded (in the table's
stored-position journal, created by migrate) against the broker: present, missing (the
broker acknowledged it and no longer holds it) or unknown (the broker cannot tell:
unreachable, past its retention). By default only the rows not yet audited (by the running
relay's audit or an earlier --repair) are checked; --all checks them all again, e.g. after
a broker lost data it held when it was last audited. --since and --until take a duration before now (30m, 2h, 7d) or a
time (2026-11-27T10:00:00Z), on the database's clock; --until defaults to now.

A dry run by default: it lists the missing rows and changes nothing. With --repair they are
made due again (status failed-will-retry, next attempt now, the retry count untouched, the
reason "lost by broker X after acknowledgement: ...") and the relay sends them again with
the same msg_id and keys, so consumers' dedupe still holds; the journal entries whose rows
were all answered for are marked audited. Rows are checked at audit.rate rows a second. The running relay does the same in the
background (audit.*); this command is for a range on demand, e.g. after a broker incident.
Exits 1 when the brokers cannot be asked.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since == "" {
				return usageError("audit: give --since (a duration such as 2h, or a time)")
			}
			ctx := cmd.Context()
			dbs, err := a.openDatabases(ctx, dbName)
			if err != nil {
				return err
			}
			defer closeOpDatabases(dbs)
			router, err := routerFrom(a.cfg.Routes)
			if err != nil {
				return err
			}
			lookup := brokeraudit.ForConfig(a.cfg)
			if err := brokeraudit.CanAsk(ctx, lookup); err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			for _, d := range dbs {
				rg, err := auditRange(ctx, d, since, until, topic, repair)
				rg.All = all
				if err != nil {
					return err
				}
				for _, table := range d.Tables {
					au, err := auditor.New(d.db, lookup, auditor.Config{Database: d.Label(), Table: table, Rate: a.cfg.Audit.Rate,
						Batch: a.cfg.Audit.BatchSize, Namespace: a.cfg.RocketMQ.Namespace, Ordered: orderedBy(router), Log: a.log})
					if err != nil {
						return err
					}
					rep, err := au.Audit(ctx, rg)
					printAudit(cmd.OutOrStdout(), d.qualified(table), rep, repair)
					if err != nil {
						return err
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "first send time checked: a duration before now (2h, 7d) or a time (RFC 3339)")
	cmd.Flags().StringVar(&until, "until", "", "last send time checked, as --since; default now")
	cmd.Flags().StringVar(&topic, "topic", "", "only rows of this topic")
	cmd.Flags().BoolVar(&repair, "repair", false, "make the missing rows due again (default: only list them)")
	cmd.Flags().BoolVar(&all, "all", false, "check the rows already audited too (default: only those not yet audited)")
	addDatabaseFlag(cmd, &dbName)
	return cmd
}

// auditRange reads --since and --until against the database's clock.
func auditRange(ctx context.Context, d opDatabase, since, until, topic string, repair bool) (auditor.Range, error) {
	now, err := ops.DBNow(ctx, d.db)
	if err != nil {
		return auditor.Range{}, err
	}
	rg := auditor.Range{Topic: topic, Repair: repair}
	if rg.From, err = pointInTime(since, now); err != nil {
		return rg, usageError("audit: --since: %v", err)
	}
	if until != "" {
		if rg.To, err = pointInTime(until, now); err != nil {
			return rg, usageError("audit: --until: %v", err)
		}
	}
	return rg, nil
}

// pointInTime reads s as a duration before now or as an RFC 3339 time.
func pointInTime(s string, now time.Time) (time.Time, error) {
	if d, err := config.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("negative duration %s", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither a duration (2h, 7d) nor a time (2026-11-27T10:00:00Z)", s)
	}
	return t, nil
}

// printAudit prints the missing rows of table and the counts.
func printAudit(w io.Writer, table string, rep auditor.Report, repair bool) {
	for _, l := range rep.Lost {
		fmt.Fprintf(w, "%s: missing id=%d msg_id=%s topic=%s tag=%s sharding_key=%s ordered=%t broker=%s queue=%d offset=%d sent=%s: %s\n",
			table, l.ID, l.MsgID, l.Topic, l.Tag, l.ShardingKey, l.Ordered, l.Broker, l.QueueID, l.QueueOffset,
			time.UnixMilli(l.SentAtMs).UTC().Format(time.RFC3339Nano), l.Reason)
	}
	verb := fmt.Sprintf("would repair %d (dry run: run again with --repair)", rep.Missing)
	if repair {
		verb = fmt.Sprintf("repaired %d (%d of ordered keys)", rep.Repaired, rep.RepairedOrdered)
	}
	if rep.Corrupt > 0 {
		verb += fmt.Sprintf("; %d journal entries did not decode (their rows not checked)", rep.Corrupt)
	}
	fmt.Fprintf(w, "%s: checked %d: present %d, missing %d, unknown %d; %s\n", table, rep.Checked, rep.Present, rep.Missing, rep.Unknown, verb)
}
