// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/redisconn"
	"github.com/outbox-relay/outbox-relay/relay"
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
	var dbName string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Count rows by status and topic, and show the backlog",
		Long: `Count the rows of each outbox table by status (pending, failed, sent, dead), break the
unsent ones down by topic, and show how many rows are due now and how long the oldest has
been waiting. Sent rows are counted in total only, so the command stays cheap on a large
history. With a databases list it shows every database's tables, or those of --database.

For each table it also shows its leader lock in Redis (the key from lock.key): "held" with
the relay holding it (host and pid, as the lock's value names them; a bare token of an older
relay names no one) and the time left before it expires unless the holder extends it, or
"free" (no relay is delivering that table). With relay.partitions > 1 it shows the lock of
each partition instead ("partition 3/8  held by ..."). When Redis cannot be read the lock
shows as "unknown" with the error, and the counts are still printed. A database that cannot be reached is reported and
the others are still shown; the command then exits 1. --json prints the same as a list of
objects with "database" (server/schema), "database_name" (with a databases list) and
"lock": {"key", "held", "ttl_ms", "holder", "error"}, and "partitions": a list of such
locks with relay.partitions > 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			dbs, err := a.selectDatabases(dbName)
			if err != nil {
				return err
			}
			rdb := a.openRedis()
			defer rdb.Close()
			reports := []ops.StatusReport{}
			var failed []error
			for _, d := range dbs {
				got, err := a.databaseStatus(ctx, rdb, d)
				if err != nil && len(dbs) == 1 && !a.cfg.MultiDatabase() {
					return err
				}
				if err != nil {
					failed = append(failed, fmt.Errorf("database %s (%s): %w", d.Name, d.Label(), err))
					continue
				}
				reports = append(reports, got...)
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), reports); err != nil {
					return err
				}
				return errors.Join(failed...)
			}
			if err := printStatus(cmd.OutOrStdout(), reports); err != nil {
				return err
			}
			return errors.Join(failed...)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	addDatabaseFlag(cmd, &dbName)
	return cmd
}

// printStatus writes the status reports as the status command's table.
func printStatus(w io.Writer, reports []ops.StatusReport) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		if r.DatabaseName != "" {
			fmt.Fprintf(tw, "table %s (database %s, %s)\n", r.Table, r.DatabaseName, r.Database)
		} else {
			fmt.Fprintf(tw, "table %s (%s)\n", r.Table, r.Database)
		}
		if len(r.Partitions) == 0 {
			fmt.Fprintf(tw, "  lock\t%s\n", lockText(*r.Lock))
		}
		for p, l := range r.Partitions {
			fmt.Fprintf(tw, "  partition %d/%d\t%s\n", p, len(r.Partitions), lockText(l))
		}
		fmt.Fprintf(tw, "  pending\t%d\n  failed\t%d\n  sent\t%d\n  dead\t%d\n", r.Pending, r.Failed, r.Sent, r.Dead)
		if r.Handed > 0 {
			fmt.Fprintf(tw, "  handed\t%d\n", r.Handed)
		}
		if r.Deleted > 0 {
			fmt.Fprintf(tw, "  deleted, never sent\t%d\n", r.Deleted)
		}
		if r.Unknown > 0 {
			fmt.Fprintf(tw, "  unknown status, never sent\t%d\t(%s)\n", r.Unknown, unknownValues(r.UnknownByValue))
		}
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
}

// unknownValues lists the status values outside the contract and their counts: "NULL: 3, 7: 1".
func unknownValues(vs []ops.StatusValue) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = fmt.Sprintf("status %s: %d", v.Value, v.Count)
	}
	return strings.Join(parts, ", ")
}

// databaseStatus reports each table of d with its lock, or with relay.partitions > 1 the
// lock of each partition.
func (a *app) databaseStatus(ctx context.Context, rdb *redisconn.Conn, d config.Database) ([]ops.StatusReport, error) {
	db, err := openMySQL(ctx, d.DSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	var out []ops.StatusReport
	for _, table := range d.Tables {
		now, err := ops.DBNow(ctx, db)
		if err != nil {
			return nil, err
		}
		r, err := ops.Status(ctx, db, table, now)
		if err != nil {
			return nil, err
		}
		r.Database = d.Label()
		if a.cfg.MultiDatabase() {
			r.DatabaseName = d.Name
		}
		key := a.cfg.LockKeyIn(d, table)
		lock := readLock(ctx, rdb, key)
		r.Lock = &lock
		if n := a.cfg.Relay.Partitions; n > 1 {
			for p := 0; p < n; p++ {
				r.Partitions = append(r.Partitions, readLock(ctx, rdb, relay.PartitionLockKey(key, p, n)))
			}
		}
		out = append(out, r)
	}
	return out, nil
}

// readLock reads the lock of key and who holds it; a failure is recorded in its Error.
func readLock(ctx context.Context, rdb *redisconn.Conn, key string) ops.LockState {
	lock, err := rdb.ReadLock(ctx, key)
	if err == nil && lock.Held {
		var h ops.LockHolder
		var named bool
		if h, named, err = ops.ReadLockHolder(ctx, rdb.LockReader(), lock.Key); named {
			lock.Holder = fmt.Sprintf("%s pid %d", h.Host, h.PID)
		}
	}
	if err != nil {
		lock.Error = err.Error()
	}
	return lock
}

func lockText(l ops.LockState) string {
	switch {
	case l.Error != "":
		return "unknown (" + l.Error + ")"
	case !l.Held:
		return "free (" + l.Key + "; no relay delivers this table)"
	case l.Holder != "":
		return fmt.Sprintf("held by %s, expires in %s unless extended (%s)", l.Holder, l.TTL.Round(100*time.Millisecond), l.Key)
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
	var after, dbName string
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List dead messages, table by table, oldest first",
		Long: `List the dead rows (status 3) of each outbox table with why they died, table by table
(in the configured order), oldest id first. Filters combine: --topic order-* --older-than 24h
lists the order topics' rows dead for a day or more. When more rows match than --limit, the
last line gives the next page's cursor: --after TABLE:ID (the table and id of the last row
printed; with --json, take them from the last element). With a databases list the rows come
database by database, the TABLE column reads DATABASE/TABLE, and so does the cursor:
--after shop-a/local_message:1234.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := ff.filter()
			if err != nil {
				return err
			}
			if limit < 1 || limit > 100000 {
				return usageError("--limit must be between 1 and 100000, got %d", limit)
			}
			dbs, err := a.selectDatabases(dbName)
			if err != nil {
				return err
			}
			cur, start, err := a.deadCursor(dbs, after)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("after-id") {
				if len(dbs) > 1 || len(dbs[0].Tables) > 1 || after != "" {
					return usageError("--after-id pages one table only: with several tables use --after TABLE:ID")
				}
				cur = ops.Cursor{Table: dbs[0].Tables[0], ID: afterID}
			}
			rows, next, err := a.deadRows(cmd.Context(), dbs[start:], f, cur, limit)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			return printDead(cmd.OutOrStdout(), rows, next)
		},
	}
	ff.add(list, true)
	list.Flags().IntVar(&limit, "limit", ops.DefaultListLimit, "print at most this many rows")
	list.Flags().StringVar(&after, "after", "", "start after this TABLE:ID (paging; the cursor printed by the previous page)")
	list.Flags().Int64Var(&afterID, "after-id", 0, "start after this id (paging one table only; see --after)")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	addDatabaseFlag(list, &dbName)
	dead.AddCommand(list)
	return dead
}

// printDead writes dead rows as dead list's table, and the next page's cursor when there
// is one.
func printDead(w io.Writer, rows []ops.DeadRow, next *ops.Cursor) error {
	if len(rows) == 0 {
		fmt.Fprintln(w, "no dead messages match")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tID\tMSG_ID\tTOPIC\tTAG\tRETRIES\tDEAD SINCE\tREASON")
	for _, r := range rows {
		name := r.Table
		if r.DatabaseName != "" {
			name = r.DatabaseName + "/" + r.Table
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", name, r.ID, r.MsgID, r.Topic, r.Tag,
			r.RetryCount, r.MaxRetryCount, r.UpdateTime.Format(time.RFC3339), oneLine(r.FailReason, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(w, "more: next page with --after %s\n", next)
	}
	return nil
}

// deadCursor reads --after for the selected databases: the cursor, and the index in dbs of
// the database it starts in. With a databases list the cursor is DATABASE/TABLE:ID.
func (a *app) deadCursor(dbs []config.Database, after string) (ops.Cursor, int, error) {
	cur, err := ops.ParseCursor(after)
	if err != nil {
		return cur, 0, usageError("--after: %v", err)
	}
	if cur.Table == "" {
		return cur, 0, nil
	}
	multi := a.cfg.MultiDatabase()
	switch {
	case multi && cur.Database == "":
		return cur, 0, usageError("--after: with a databases list, give DATABASE/TABLE:ID (as printed by the previous page)")
	case !multi && cur.Database != "":
		return cur, 0, usageError("--after: a DATABASE/ prefix needs a databases list; give TABLE:ID")
	}
	names := make([]string, len(dbs))
	for i, d := range dbs {
		names[i] = d.Name
		if multi && d.Name != cur.Database {
			continue
		}
		if !slices.Contains(d.Tables, cur.Table) {
			return cur, 0, usageError("--after: table %s is not configured (tables: %s)", cur.Table, strings.Join(d.Tables, ", "))
		}
		return cur, i, nil
	}
	return cur, 0, usageError("--after: database %s is not selected (databases: %s)", cur.Database, strings.Join(names, ", "))
}

// deadRows lists up to limit dead rows of dbs, database by database, starting at cur (in
// dbs[0]); next is the cursor of the following page, or nil when none is left.
func (a *app) deadRows(ctx context.Context, dbs []config.Database, f ops.Filter, cur ops.Cursor, limit int) (rows []ops.DeadRow, next *ops.Cursor, err error) {
	rows = []ops.DeadRow{}
	for i, d := range dbs {
		od, err := a.openDatabase(ctx, d)
		if err != nil {
			return nil, nil, err
		}
		after := ops.Cursor{}
		if i == 0 {
			after = ops.Cursor{Table: cur.Table, ID: cur.ID}
		}
		if len(rows) == limit {
			// The page is full: one row more in a later database means a next page.
			more, _, err := ops.DeadPage(ctx, od.db, d.Tables, f, after, 1)
			od.db.Close()
			if err != nil {
				return nil, nil, err
			}
			if len(more) > 0 {
				last := rows[len(rows)-1]
				return rows, &ops.Cursor{Database: last.DatabaseName, Table: last.Table, ID: last.ID}, nil
			}
			continue
		}
		got, n, err := ops.DeadPage(ctx, od.db, d.Tables, f, after, limit-len(rows))
		od.db.Close()
		if err != nil {
			return nil, nil, err
		}
		for _, r := range got {
			r.DatabaseName = od.dbName()
			rows = append(rows, r)
		}
		if n != nil {
			n.Database = od.dbName()
			return rows, n, nil
		}
	}
	return rows, nil, nil
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
	var dbName string
	cmd := &cobra.Command{
		Use:   "requeue",
		Short: "Send dead messages again",
		Long: `Set dead rows back to pending with a fresh retry budget (status 0, retry_count 0,
next_retry_time 0, fail_reason NULL), so the relay sends them at once. Only rows that are
dead are changed. Select them with --msg-id (repeatable), --topic, --tag, --older-than, or
take every dead row with --all-dead; selections combine with AND.

More than 10 rows are changed only after a confirmation on the terminal, or with --yes.
Without a terminal and without --yes the command refuses and exits 3. With a databases list
it acts on every database's tables, or on those of --database; the count and the
confirmation cover them all.`,
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
			dbs, err := a.openDatabases(ctx, dbName)
			if err != nil {
				return err
			}
			defer closeOpDatabases(dbs)
			out := cmd.OutOrStdout()
			total, tables, err := countDeadIn(ctx, dbs, f)
			if err != nil {
				return err
			}
			if dryRun {
				fmt.Fprintf(out, "would requeue %d dead row(s) in %s\n", total, strings.Join(tables, ", "))
				return nil
			}
			if err := a.confirmRequeue(out, total, tables, yes); err != nil {
				return err
			}
			results, err := a.requeueIn(ctx, dbs, f)
			if err != nil {
				return err
			}
			missed := notRequeued(f.MsgIDs, results)
			if err := printRequeued(out, results, asJSON); err != nil {
				return err
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
	addDatabaseFlag(cmd, &dbName)
	return cmd
}

// countDeadIn counts the dead rows f selects in every table of dbs, and names each table
// (server, schema and table: the person confirming sees which database it is).
func countDeadIn(ctx context.Context, dbs []opDatabase, f ops.Filter) (int64, []string, error) {
	var tables []string
	var total int64
	for _, d := range dbs {
		for _, table := range d.Tables {
			n, err := ops.CountDead(ctx, d.db, table, f)
			if err != nil {
				return 0, nil, err
			}
			total += n
			tables = append(tables, d.qualified(table)+" on "+d.Label())
		}
	}
	return total, tables, nil
}

// confirmRequeue asks before more than confirmAbove rows change, unless yes; without a
// terminal it refuses.
func (a *app) confirmRequeue(out io.Writer, total int64, tables []string, yes bool) error {
	if total <= confirmAbove || yes {
		return nil
	}
	if !a.interactive {
		return refusedError("requeue: %d dead rows match; changing more than %d rows needs confirmation, and stdin is not a terminal: re-run with --yes (or --dry-run to check the count)", total, confirmAbove)
	}
	fmt.Fprintf(out, "Requeue %d dead rows in %s? [y/N] ", total, strings.Join(tables, ", "))
	answer, _ := bufio.NewReader(a.in).ReadString('\n')
	if ans := strings.ToLower(strings.TrimSpace(answer)); ans != "y" && ans != "yes" {
		return refusedError("requeue: not confirmed; nothing changed")
	}
	return nil
}

// requeueIn requeues the dead rows f selects in every table of dbs.
func (a *app) requeueIn(ctx context.Context, dbs []opDatabase, f ops.Filter) ([]ops.RequeueResult, error) {
	results := []ops.RequeueResult{}
	for _, d := range dbs {
		for _, table := range d.Tables {
			res, err := ops.Requeue(ctx, d.db, table, f)
			if err != nil {
				return nil, err
			}
			res.DatabaseName = d.dbName()
			results = append(results, res)
			a.log.Info().Str("database_name", d.Name).Str("database", d.Label()).Str("table", table).
				Int("requeued", len(res.Requeued)).Msg("requeued dead messages")
		}
	}
	return results, nil
}

// printRequeued writes what requeue changed: JSON, or per table the count and the first
// 50 msg ids.
func printRequeued(out io.Writer, results []ops.RequeueResult, asJSON bool) error {
	if asJSON {
		return writeJSON(out, results)
	}
	for _, res := range results {
		fmt.Fprintf(out, "%s: requeued %d row(s)\n", resultName(res.DatabaseName, res.Table), len(res.Requeued))
		const show = 50
		for i, id := range res.Requeued {
			if i == show {
				fmt.Fprintf(out, "  ... and %d more (use --json for the full list)\n", len(res.Requeued)-show)
				break
			}
			fmt.Fprintf(out, "  %s\n", id)
		}
	}
	return nil
}

// resultName names a table in a command's output: DATABASE/TABLE with a databases list.
func resultName(database, table string) string {
	if database != "" {
		return database + "/" + table
	}
	return table
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
				why = append(why, resultName(res.DatabaseName, res.Table)+": "+r)
			}
		}
		switch {
		case done:
		case len(why) == 0:
			tables := make([]string, len(results))
			for i, res := range results {
				tables[i] = resultName(res.DatabaseName, res.Table)
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
	var dryRun, asJSON, allowShort bool
	var dbName string
	cmd := &cobra.Command{
		Use:   "purge",
		Short: "Delete sent rows older than a retention, in small batches",
		Long: `Delete the sent rows (status 2) last updated and sent longer ago than --older-than
(default: relay.purge_retention), in batches of --delete-batch-size rows, each its own short
statement walking the sent rows of the (status, next_retry_time) index. Pending, failed and dead rows are never
touched, and it is safe while the relay runs. --dry-run only counts. With a databases list it
purges every database's tables, or those of --database.

A retention under 1h is refused unless --allow-short-retention is given: once a row is
purged, the unique key no longer sees its msg_id, so an insert of the same msg_id succeeds
and is published again; consumers drop it only while they still remember its key.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("older-than") {
				olderThan = a.cfg.Relay.PurgeRetention
			}
			if olderThan <= 0 {
				return usageError("purge: give the retention with --older-than (e.g. 7d) or relay.purge_retention")
			}
			if olderThan < ops.MinPurgeRetention && !allowShort {
				return usageError("purge: --older-than %s is under the %s floor: a purged row's msg_id can be inserted and published again "+
					"(the unique key no longer sees it); re-run with --allow-short-retention if that is what you want", olderThan, ops.MinPurgeRetention)
			}
			if batch < 1 || batch > 100000 {
				return usageError("--delete-batch-size must be between 1 and 100000, got %d", batch)
			}
			ctx := cmd.Context()
			dbs, err := a.openDatabases(ctx, dbName)
			if err != nil {
				return err
			}
			defer closeOpDatabases(dbs)
			results := []ops.PurgeResult{}
			for _, d := range dbs {
				for _, table := range d.Tables {
					res, err := ops.Purge(ctx, d.db, table, ops.PurgeOptions{OlderThan: olderThan, BatchSize: batch, DryRun: dryRun})
					if err != nil {
						return err
					}
					res.DatabaseName = d.dbName()
					results = append(results, res)
					if !dryRun {
						a.log.Info().Str("database_name", d.Name).Str("database", d.Label()).Str("table", table).
							Int64("deleted", res.Deleted).Msg("purged sent rows")
					}
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
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %d sent row(s) last updated before %s\n", resultName(r.DatabaseName, r.Table), verb, r.Deleted, r.Cutoff)
				if r.JournalDeleted > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %d stored-position journal entr(ies) settled before then\n", resultName(r.DatabaseName, r.Table), verb, r.JournalDeleted)
				}
			}
			return nil
		},
	}
	cmd.Flags().Var(config.NewDuration(&olderThan, 0), "older-than", "retention: delete sent rows older than this (e.g. 168h, 7d); default relay.purge_retention")
	cmd.Flags().IntVar(&batch, "delete-batch-size", 1000, "rows deleted per statement")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count the rows that would be deleted")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allowShort, "allow-short-retention", false, "accept an --older-than under 1h (purged msg_ids can be inserted and published again)")
	addDatabaseFlag(cmd, &dbName)
	return cmd
}
