package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// confirmAbove is the number of rows requeue changes without asking.
const confirmAbove = 10

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) newStatusCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count rows by status and topic, and show the backlog",
		Long: `Count the rows of each outbox table by status (pending, failed, sent, dead), break the
unsent ones down by topic, and show how many rows are due now and how long the oldest has
been waiting. Sent rows are counted in total only, so the command stays cheap on a large
history.

For each table it also shows its leader lock in Redis (the key from lock.key): "held" with
the time left before it expires unless the holder extends it, or "free" (no relay is
delivering that table). The lock's value is a random token, so status tells that a relay
holds it, not which one. When Redis cannot be read the lock shows as "unknown" with the
error, and the counts are still printed. --json prints the same as a list of objects with
"database" and "lock": {"key", "held", "ttl_ms", "error"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			db, err := a.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			rdb := a.openRedis()
			defer rdb.Close()
			reports := []ops.StatusReport{}
			for _, table := range a.cfg.Tables() {
				r, err := ops.Status(ctx, db, table, time.Now())
				if err != nil {
					return err
				}
				r.Database = a.cfg.DatabaseLabel()
				lock, err := rdb.ReadLock(ctx, a.cfg.LockKey(table))
				if err != nil {
					lock.Error = err.Error()
				}
				r.Lock = &lock
				reports = append(reports, r)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), reports)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for i, r := range reports {
				if i > 0 {
					fmt.Fprintln(tw)
				}
				fmt.Fprintf(tw, "table %s (%s)\n", r.Table, r.Database)
				fmt.Fprintf(tw, "  lock\t%s\n", lockText(*r.Lock))
				fmt.Fprintf(tw, "  pending\t%d\n  failed\t%d\n  sent\t%d\n  dead\t%d\n", r.Pending, r.Failed, r.Sent, r.Dead)
				fmt.Fprintf(tw, "  due now\t%d\n  oldest due\t%s\n", r.Due, r.OldestDueAge.Round(time.Second))
				if len(r.ByTopic) > 0 {
					fmt.Fprintln(tw, "\n  STATUS\tTOPIC\tCOUNT\t")
					for _, tc := range r.ByTopic {
						st := tc.Status
						if tc.Deleted {
							st += " (deleted)"
						}
						fmt.Fprintf(tw, "  %s\t%s\t%d\t\n", st, tc.Topic, tc.Count)
					}
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

// lockText shows a lock state on one line: held with its TTL, free, or unknown.
func lockText(l ops.LockState) string {
	switch {
	case l.Error != "":
		return "unknown (" + l.Error + ")"
	case !l.Held:
		return "free (" + l.Key + "; no relay delivers this table)"
	case l.TTL == 0:
		return "held, no expiry (" + l.Key + ")"
	default:
		return fmt.Sprintf("held, expires in %s unless extended (%s)", l.TTL.Round(100*time.Millisecond), l.Key)
	}
}

// filterFlags are the dead-row selection flags shared by dead list and requeue.
type filterFlags struct {
	msgIDs     []string
	topic, tag string
	olderThan  time.Duration
}

func (f *filterFlags) add(cmd *cobra.Command, withMsgID bool) {
	if withMsgID {
		cmd.Flags().StringArrayVar(&f.msgIDs, "msg-id", nil, "select this msg_id (repeatable)")
	}
	cmd.Flags().StringVar(&f.topic, "topic", "", "select this topic; * matches any characters (order-*)")
	cmd.Flags().StringVar(&f.tag, "tag", "", "select this tag; * matches any characters")
	cmd.Flags().Var(config.NewDuration(&f.olderThan, 0), "older-than", "select rows dead for at least this long (e.g. 1h, 72h, 7d)")
}

func (f *filterFlags) filter() (ops.Filter, error) {
	if f.olderThan < 0 {
		return ops.Filter{}, usageError("--older-than must not be negative, got %s", f.olderThan)
	}
	for _, id := range f.msgIDs {
		if strings.TrimSpace(id) == "" {
			return ops.Filter{}, usageError("--msg-id must not be empty")
		}
	}
	return ops.Filter{MsgIDs: f.msgIDs, Topic: f.topic, Tag: f.tag, OlderThan: f.olderThan}, nil
}

func (a *app) newDeadCmd() *cobra.Command {
	dead := &cobra.Command{
		Use:   "dead",
		Short: "Inspect dead messages (see: dead list)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError("dead: missing subcommand (try: outbox-relay dead list)")
		},
	}
	var ff filterFlags
	var limit int
	var afterID int64
	var after string
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead messages, table by table, oldest first",
		Long: `List the dead rows (status 3) of each outbox table with why they died, table by table
(in the configured order), oldest id first. Filters combine: --topic order-* --older-than 24h
lists the order topics' rows dead for a day or more. When more rows match than --limit, the
last line gives the next page's cursor: --after TABLE:ID (the table and id of the last row
printed; with --json, take them from the last element).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter()
			if err != nil {
				return err
			}
			if limit < 1 || limit > 100000 {
				return usageError("--limit must be between 1 and 100000, got %d", limit)
			}
			tables := a.cfg.Tables()
			cur, err := ops.ParseCursor(after)
			if err != nil {
				return usageError("--after: %v", err)
			}
			if cur.Table != "" && !slices.Contains(tables, cur.Table) {
				return usageError("--after: table %s is not configured (tables: %s)", cur.Table, strings.Join(tables, ", "))
			}
			if cmd.Flags().Changed("after-id") {
				if len(tables) > 1 || after != "" {
					return usageError("--after-id pages one table only: with several tables use --after TABLE:ID")
				}
				cur = ops.Cursor{Table: tables[0], ID: afterID}
			}
			ctx := cmd.Context()
			db, err := a.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			rows, next, err := ops.DeadPage(ctx, db, tables, f, cur, limit)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			if len(rows) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no dead messages match")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TABLE\tID\tMSG_ID\tTOPIC\tTAG\tRETRIES\tDEAD SINCE\tREASON")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", r.Table, r.ID, r.MsgID, r.Topic, r.Tag,
					r.RetryCount, r.MaxRetryCount, r.UpdateTime.Format(time.RFC3339), oneLine(r.FailReason, 80))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if next != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "more: next page with --after %s\n", next)
			}
			return nil
		},
	}
	ff.add(list, true)
	list.Flags().IntVar(&limit, "limit", ops.DefaultListLimit, "print at most this many rows")
	list.Flags().StringVar(&after, "after", "", "start after this TABLE:ID (paging; the cursor printed by the previous page)")
	list.Flags().Int64Var(&afterID, "after-id", 0, "start after this id (paging one table only; see --after)")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	dead.AddCommand(list)
	return dead
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (a *app) newRequeueCmd() *cobra.Command {
	var ff filterFlags
	var all, yes, dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "requeue",
		Short: "Send dead messages again",
		Long: `Set dead rows back to pending with a fresh retry budget (status 0, retry_count 0,
next_retry_time 0, fail_reason NULL), so the relay sends them at once. Only rows that are
dead are changed. Select them with --msg-id (repeatable), --topic, --tag, --older-than, or
take every dead row with --all-dead; selections combine with AND.

More than 10 rows are changed only after a confirmation on the terminal, or with --yes.
Without a terminal and without --yes the command refuses and exits 3.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter()
			if err != nil {
				return err
			}
			f.All = all
			if len(f.MsgIDs) == 0 && f.Topic == "" && f.Tag == "" && f.OlderThan == 0 && !all {
				return usageError("requeue: choose the rows with --msg-id, --topic, --tag, --older-than, or --all-dead")
			}
			ctx := cmd.Context()
			db, err := a.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			out := cmd.OutOrStdout()
			tables := a.cfg.Tables()
			var total int64
			for _, table := range tables {
				n, err := ops.CountDead(ctx, db, table, f)
				if err != nil {
					return err
				}
				total += n
			}
			if dryRun {
				fmt.Fprintf(out, "would requeue %d dead row(s) in %s\n", total, strings.Join(tables, ", "))
				return nil
			}
			if total > confirmAbove && !yes {
				if !a.interactive {
					return refusedError("requeue: %d dead rows match; changing more than %d rows needs confirmation, and stdin is not a terminal: re-run with --yes (or --dry-run to check the count)", total, confirmAbove)
				}
				fmt.Fprintf(out, "Requeue %d dead rows in %s? [y/N] ", total, strings.Join(tables, ", "))
				answer, _ := bufio.NewReader(a.in).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
					return refusedError("requeue: not confirmed; nothing changed")
				}
			}
			results := []ops.RequeueResult{}
			for _, table := range tables {
				res, err := ops.Requeue(ctx, db, table, f)
				if err != nil {
					return err
				}
				results = append(results, res)
				a.log.Info().Str("table", table).Int("requeued", len(res.Requeued)).Msg("requeued dead messages")
			}
			missed := notRequeued(f.MsgIDs, results)
			if asJSON {
				if err := writeJSON(out, results); err != nil {
					return err
				}
			} else {
				for _, res := range results {
					fmt.Fprintf(out, "%s: requeued %d row(s)\n", res.Table, len(res.Requeued))
					const show = 50
					for i, id := range res.Requeued {
						if i == show {
							fmt.Fprintf(out, "  ... and %d more (use --json for the full list)\n", len(res.Requeued)-show)
							break
						}
						fmt.Fprintf(out, "  %s\n", id)
					}
				}
			}
			if len(missed) > 0 {
				return fmt.Errorf("requeue: %d of the %d msg-id(s) asked for were not requeued:\n  %s",
					len(missed), len(uniq(f.MsgIDs)), strings.Join(missed, "\n  "))
			}
			return nil
		},
	}
	ff.add(cmd, true)
	cmd.Flags().BoolVar(&all, "all-dead", false, "select every dead row (combined with the other filters, if any)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count the rows that would be requeued")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// notRequeued explains each msg-id of asked that no table requeued, one line per id: why
// the table holding it left it alone, or that no configured table holds it.
func notRequeued(asked []string, results []ops.RequeueResult) []string {
	var out []string
	for _, id := range uniq(asked) {
		done := false
		var why []string
		for _, res := range results {
			if slices.Contains(res.Requeued, id) {
				done = true
				break
			}
			if r, ok := res.Skipped[id]; ok && r != ops.SkipNotFound {
				why = append(why, res.Table+": "+r)
			}
		}
		switch {
		case done:
		case len(why) == 0:
			tables := make([]string, len(results))
			for i, res := range results {
				tables[i] = res.Table
			}
			out = append(out, fmt.Sprintf("%s: not found in %s", id, strings.Join(tables, ", ")))
		default:
			out = append(out, id+": "+strings.Join(why, "; "))
		}
	}
	return out
}

func uniq(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func (a *app) newPurgeCmd() *cobra.Command {
	var olderThan time.Duration
	var batch int
	var dryRun, asJSON bool
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete sent rows older than a retention, in small batches",
		Long: `Delete the sent rows (status 2) last updated and sent longer ago than --older-than
(default: relay.purge_retention), in batches of --delete-batch-size rows, each its own short
statement walking the (status, update_time) index. Pending, failed and dead rows are never
touched, and it is safe while the relay runs. --dry-run only counts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				olderThan = a.cfg.Relay.PurgeRetention
			}
			if olderThan <= 0 {
				return usageError("purge: give the retention with --older-than (e.g. 7d) or relay.purge_retention")
			}
			if batch < 1 || batch > 100000 {
				return usageError("--delete-batch-size must be between 1 and 100000, got %d", batch)
			}
			ctx := cmd.Context()
			db, err := a.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			results := []ops.PurgeResult{}
			for _, table := range a.cfg.Tables() {
				res, err := ops.Purge(ctx, db, table, ops.PurgeOptions{OlderThan: olderThan, BatchSize: batch, DryRun: dryRun})
				if err != nil {
					return err
				}
				results = append(results, res)
				if !dryRun {
					a.log.Info().Str("table", table).Int64("deleted", res.Deleted).Msg("purged sent rows")
				}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), results)
			}
			for _, r := range results {
				verb := "deleted"
				if r.DryRun {
					verb = "would delete"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %d sent row(s) last updated before %s\n", r.Table, verb, r.Deleted, r.Cutoff)
			}
			return nil
		},
	}
	cmd.Flags().Var(config.NewDuration(&olderThan, 0), "older-than", "retention: delete sent rows older than this (e.g. 168h, 7d); default relay.purge_retention")
	cmd.Flags().IntVar(&batch, "delete-batch-size", 1000, "rows deleted per statement")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count the rows that would be deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
