// SPDX-License-Identifier: Apache-2.0

package main

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/schema"
)

// newMigrateCmd builds the migrate command: its flags, wired to runMigrate.
func (a *app) newMigrateCmd() *cobra.Command {
	var check, printSQL, allowBlocking bool
	var dedupeTables []string
	var dbName string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table(s), or print the DDL",
		Long:  migrateLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runMigrate(cmd, migrateOptions{check: check, printSQL: printSQL, allowBlocking: allowBlocking,
				dedupeTables: dedupeTables}, dbName)
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "only report what migrate would change; exit 1 if anything")
	cmd.Flags().BoolVar(&printSQL, "print-sql", false, "print the DDL migrate would run (online or BLOCKING), run nothing")
	cmd.Flags().BoolVar(&allowBlocking, "allow-blocking", false, "also run steps that block writes on a table with rows (making id AUTO_INCREMENT)")
	cmd.Flags().StringArrayVar(&dedupeTables, "dedupe-table", nil, "create this consumer dedupe table (package idempotency's SQL store; repeatable); without --table/--tables, only it")
	addDatabaseFlag(cmd, &dbName)
	return cmd
}

// migrateLong is migrate's help.
const migrateLong = `Create each configured outbox table, or upgrade a classic local-message table in
place (the widely copied local_message DDL whose id the application chooses, shown in
docs/adopting.md: missing columns and indexes are added; rows are kept).
Running it again on an up-to-date table changes nothing.

Upgrades use online DDL: one ALTER TABLE ... ALGORITHM=INPLACE, LOCK=NONE adds the
missing columns and indexes while the application keeps writing. One change cannot be
online: making id AUTO_INCREMENT (a classic table, with application-chosen ids) copies
the table, and writes wait for the copy. migrate runs such a blocking step on a table
that has rows only with --allow-blocking; without it, it runs the online steps, then
stops with exit 1 naming the blocking one: on a classic table with rows, expect that
exit 1 unless you pass --allow-blocking. The same holds for an online step the server
refuses to run online. Each step is reported as it runs, and the table is checked again
afterwards: a table migrate cannot see (an account without SELECT on it) is an error,
never "created". Column comments are kept.

Rows the classic relay gave up on (status 1 with retry_count > max_retry_count: it skips
them for good) are listed and parked dead (status 3), so that the relay does not send
months-old messages; requeue the ones still wanted. --check reports them.

--dedupe-table NAME creates the consumer dedupe table of package idempotency (SQL store)
and, unless --table or --tables is given too, nothing else: the consumer's database gets
no outbox table.

With relay.partitions > 1 it also adds the relay_partition column (VIRTUAL, CRC32 of
sharding_key modulo the number of partitions) and its index online, or replaces them when
the table was made for another number; with 1 it removes them.

--print-sql prints the statements migrate would run, marked online or BLOCKING, with
their ALTER clauses for gh-ost and pt-online-schema-change, and runs nothing: hand them to
Flyway, Liquibase or your DBA. With --check nothing is changed: the differences are
listed and the exit code is 1 if there are any. With a databases list, every database's
tables are migrated (or those of --database); --dedupe-table then needs --database.`

// runMigrate migrates the tables of every database (or of dbName) as o says, and fails
// when --check finds tables that need migrating.
func (a *app) runMigrate(cmd *cobra.Command, o migrateOptions, dbName string) error {
	if o.check && o.printSQL {
		return usageError("migrate: --check and --print-sql do not go together")
	}
	for _, t := range o.dedupeTables {
		if err := schema.ValidateIdent(t); err != nil {
			return usageError("--dedupe-table: %v", err)
		}
	}
	dbs, err := a.openDatabases(cmd.Context(), dbName)
	if err != nil {
		return err
	}
	defer closeOpDatabases(dbs)
	if len(o.dedupeTables) > 0 && len(dbs) > 1 {
		return usageError("--dedupe-table: choose the database that gets it with --database")
	}
	fl := cmd.Flags()
	o.dedupeOnly = len(o.dedupeTables) > 0 && !fl.Changed("table") && !fl.Changed("tables")
	var pending int
	for _, d := range dbs {
		n, err := a.migrateDatabase(cmd, d, o)
		pending += n
		if err != nil {
			return err
		}
	}
	if pending > 0 {
		return fmt.Errorf("%d table(s) need migrating: run outbox-relay migrate", pending)
	}
	return nil
}

// migrateOptions are migrate's flags.
type migrateOptions struct {
	check, printSQL, allowBlocking bool
	dedupeTables                   []string
	// dedupeOnly is set when --dedupe-table is given without --table or --tables: migrate
	// then creates the dedupe tables and touches no outbox table (a consumer's database has
	// none, and must not get one).
	dedupeOnly bool
}

// givenUpListed is how many of the rows a previous relay gave up on migrate lists by name.
const givenUpListed = 20

// migrateDatabase migrates (or checks, or prints) the tables of d and the dedupe tables, and
// returns how many tables o.check found out of date.
func (a *app) migrateDatabase(cmd *cobra.Command, d opDatabase, o migrateOptions) (pending int, err error) {
	if o.printSQL {
		fmt.Fprintf(cmd.OutOrStdout(), "-- outbox-relay migrate --print-sql for %s: nothing was run.\n", d.Label())
	}
	tables := d.Tables
	if o.dedupeOnly {
		tables = nil
	}
	for _, tbl := range tables {
		stale, err := a.migrateTable(cmd, d, tbl, o)
		if stale {
			pending++
		}
		if err != nil {
			return pending, err
		}
	}
	for _, table := range o.dedupeTables {
		stale, err := migrateDedupe(cmd, d.db, table, o)
		if stale {
			pending++
		}
		if err != nil {
			return pending, err
		}
	}
	return pending, nil
}

// migrateTable migrates (or checks, or prints) the outbox table tbl of d; stale reports that
// o.check found it out of date.
func (a *app) migrateTable(cmd *cobra.Command, d opDatabase, tbl string, o migrateOptions) (stale bool, err error) {
	ctx, db, out := cmd.Context(), d.db, cmd.OutOrStdout()
	table := d.qualified(tbl) // as printed; tbl is the table's name in SQL
	before, err := schema.CheckPartitioned(ctx, db, tbl, a.cfg.Relay.Partitions)
	if err != nil {
		return false, fmt.Errorf("check table %s: %w", table, err)
	}
	givenUp, err := a.givenUp(cmd, d, tbl, before, o)
	if err != nil {
		return false, err
	}
	if err := reportUnknown(cmd, d, tbl, before); err != nil {
		return false, err
	}
	if o.check {
		if len(before) == 0 && givenUp == 0 {
			fmt.Fprintf(out, "%s: up to date\n", table)
			return false, nil
		}
		for _, p := range before {
			fmt.Fprintf(out, "%s: %s\n", table, p)
		}
		return true, nil
	}
	steps, err := schema.PlanPartitioned(ctx, db, tbl, a.cfg.Relay.Partitions)
	if err != nil {
		return false, err
	}
	if o.printSQL {
		printSteps(out, table, steps)
		return false, nil
	}
	if len(steps) == 0 {
		fmt.Fprintf(out, "%s: up to date\n", table)
		return false, nil
	}
	if err := a.applySteps(cmd, d, tbl, steps, o.allowBlocking); err != nil {
		return false, err
	}
	// Trust the table, not the statements: an account that cannot see what it changed,
	// or a server that ignored a clause, must not pass for a migrated table.
	after, err := schema.CheckPartitioned(ctx, db, tbl, a.cfg.Relay.Partitions)
	if err != nil {
		return false, fmt.Errorf("check table %s after migrating: %w", table, err)
	}
	if len(after) > 0 {
		return false, fmt.Errorf("table %s still differs after migrate ran its steps: %s", table, problemList(after))
	}
	if len(before) == 1 && before[0].Kind == "missing table" {
		fmt.Fprintf(out, "%s: created\n", table)
	} else {
		fmt.Fprintf(out, "%s: upgraded (%d change(s))\n", table, len(before))
		for _, p := range before {
			fmt.Fprintf(out, "  fixed: %s\n", p)
		}
	}
	a.log.Info().Str("database_name", d.Name).Str("database", d.Label()).Str("table", tbl).Int("changes", len(before)).Msg("migrated")
	return false, nil
}

// migrateDedupe creates (or checks, or prints) the consumer dedupe table named table in db;
// stale reports that o.check found it missing.
func migrateDedupe(cmd *cobra.Command, db *sql.DB, table string, o migrateOptions) (stale bool, err error) {
	ctx, out := cmd.Context(), cmd.OutOrStdout()
	steps, err := schema.DedupePlan(ctx, db, table)
	switch {
	case err != nil:
		return false, fmt.Errorf("dedupe table %s: %w", table, err)
	case o.printSQL:
		printSteps(out, table, steps)
	case o.check && len(steps) > 0:
		fmt.Fprintf(out, "%s: missing dedupe table\n", table)
		return true, nil
	case len(steps) == 0:
		fmt.Fprintf(out, "%s: dedupe table exists\n", table)
	case !o.check:
		if err := schema.Apply(ctx, db, table, steps, false); err != nil {
			return false, err
		}
		if again, err := schema.DedupePlan(ctx, db, table); err != nil || len(again) > 0 {
			return false, fmt.Errorf("dedupe table %s: not there after CREATE TABLE (%v)", table, err)
		}
		fmt.Fprintf(out, "%s: dedupe table created\n", table)
	}
	return false, nil
}

// applySteps runs steps on tbl one at a time and says which it ran, so that a migration that
// stops (at a blocking step, or on an error) leaves no doubt about what was done.
func (a *app) applySteps(cmd *cobra.Command, d opDatabase, tbl string, steps []schema.Step, allowBlocking bool) error {
	out, table := cmd.OutOrStdout(), d.qualified(tbl)
	for i, st := range steps {
		err := schema.Apply(cmd.Context(), d.db, tbl, []schema.Step{st}, allowBlocking)
		if errors.Is(err, schema.ErrNotOnline) {
			fmt.Fprintf(out, "%s: stopped before step %d of %d (BLOCKING, not run): %s\n", table, i+1, len(steps), stepSummary(st))
			return fmt.Errorf("%w\nran %d of %d step(s); run the rest in a maintenance window with `outbox-relay migrate --allow-blocking`, "+
				"or print the DDL with --print-sql for gh-ost or pt-online-schema-change", err, i, len(steps))
		}
		if err != nil {
			fmt.Fprintf(out, "%s: step %d of %d failed: %s\n", table, i+1, len(steps), stepSummary(st))
			return err
		}
		if st.Alter == "" && !st.Backfill {
			continue // a CREATE TABLE: reported as "created"
		}
		how := "online"
		if !st.Online {
			how = "BLOCKING"
		}
		fmt.Fprintf(out, "%s: ran step %d of %d (%s): %s\n", table, i+1, len(steps), how, stepSummary(st))
	}
	return nil
}

// stepSummary is a step on one line: its ALTER clauses, or the statement's first line.
func stepSummary(st schema.Step) string {
	if st.Alter != "" {
		return st.Alter
	}
	line, _, _ := strings.Cut(strings.TrimSpace(st.SQL), "\n")
	return strings.TrimSuffix(strings.TrimSpace(line), "(")
}

func problemList(ps []schema.Problem) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, "; ")
}

// givenUp lists the rows of tbl a previous relay gave up on (schema.GivenUp) and, unless o
// only checks or prints, parks them dead. It returns how many there were; a table without
// seed 002's retry columns has none.
func (a *app) givenUp(cmd *cobra.Command, d opDatabase, tbl string, before []schema.Problem, o migrateOptions) (int, error) {
	for _, p := range before {
		switch {
		case p.Kind == "missing table",
			p.Kind == "missing column" && (p.Object == "status" || p.Object == "retry_count" || p.Object == "max_retry_count" || p.Object == "is_deleted"):
			return 0, nil
		}
	}
	ctx, out, table := cmd.Context(), cmd.OutOrStdout(), d.qualified(tbl)
	n, rows, err := schema.GivenUp(ctx, d.db, tbl, givenUpListed)
	if err != nil || n == 0 {
		return n, err
	}
	if o.printSQL {
		q, _ := schema.ParkGivenUpSQL(tbl)
		fmt.Fprintf(out, "\n-- %s: %d row(s) the previous relay gave up on (retry_count > max_retry_count, left at status 1): "+
			"parked dead, never sent (requeue the wanted ones)\n%s;\n", table, n, q)
		return n, nil
	}
	verb := "parked dead (never sent; `outbox-relay requeue --msg-id ...` sends one)"
	if o.check {
		verb = "migrate parks them dead, or the relay would send them at once"
	}
	fmt.Fprintf(out, "%s: %d row(s) the previous relay gave up on (status 1, retry_count > max_retry_count): %s\n", table, n, verb)
	for _, r := range rows {
		fmt.Fprintf(out, "  id %d msg_id %s topic %s tag %q retries %d/%d created %s\n", r.ID, r.MsgID, r.Topic, r.Tag, r.RetryCount, r.MaxRetryCount, r.Created)
	}
	if n > len(rows) {
		fmt.Fprintf(out, "  ... and %d more (outbox-relay dead list --table %s after migrate)\n", n-len(rows), tbl)
	}
	if o.check {
		return n, nil
	}
	parked, err := schema.ParkGivenUp(ctx, d.db, tbl)
	if err != nil {
		return n, err
	}
	a.log.Info().Str("database", d.Label()).Str("table", tbl).Int64("parked", parked).Msg("rows given up on by the previous relay parked dead")
	return n, nil
}

// reportUnknown says how many rows of tbl have a status that is NULL or outside 0-4: the
// relay never sends them. migrate parks the NULL ones dead (see schema.NullStatusReason);
// the others are the operator's to settle.
func reportUnknown(cmd *cobra.Command, d opDatabase, tbl string, before []schema.Problem) error {
	for _, p := range before {
		if p.Kind == "missing table" || p.Kind == "missing column" && p.Object == "status" {
			return nil
		}
	}
	n, err := ops.CountUnknown(cmd.Context(), d.db, tbl)
	if err != nil || n == 0 {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %d row(s) of unknown status (NULL or outside 0-4), never sent: `outbox-relay status` lists them by value; "+
		"migrate parks the NULL ones dead, settle the others by hand (docs/adopting.md, \"Rows of unknown status\")\n", d.qualified(tbl), n)
	return nil
}

// printSteps writes the steps of table as SQL a person or a migration tool can run.
func printSteps(w io.Writer, table string, steps []schema.Step) {
	if len(steps) == 0 {
		fmt.Fprintf(w, "-- %s: up to date\n", table)
		return
	}
	for _, st := range steps {
		if st.Online {
			fmt.Fprintf(w, "\n-- %s: online (the application keeps writing)\n", table)
		} else {
			fmt.Fprintf(w, "\n-- %s: BLOCKING: %s\n", table, st.Blocking)
		}
		if st.Alter != "" {
			fmt.Fprintf(w, "-- gh-ost / pt-online-schema-change --alter: %s\n", st.Alter)
		}
		if st.Note != "" {
			fmt.Fprintf(w, "-- %s\n", st.Note)
		}
		if st.Backfill {
			what := "backfill of NULLs"
			if st.Note != "" {
				what = "backfill"
			}
			fmt.Fprintf(w, "-- %s: migrate runs it in primary key ranges (AND id BETWEEN ...), one short transaction each\n", what)
		}
		fmt.Fprintf(w, "%s;\n", strings.TrimSpace(st.SQL))
	}
}
