package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/schema"
)

func (a *app) newMigrateCmd() *cobra.Command {
	var check, printSQL, allowBlocking bool
	var dedupeTables []string
	var dbName string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table(s), or print the DDL",
		Long: `Create each configured outbox table, or upgrade one made with the original
local_message DDL in place (missing columns and indexes are added; rows are kept).
Running it again on an up-to-date table changes nothing.

Upgrades use online DDL: one ALTER TABLE ... ALGORITHM=INPLACE, LOCK=NONE adds the
missing columns and indexes while the application keeps writing. One change cannot be
online: making id AUTO_INCREMENT (a seed-002 table with application-chosen ids) copies
the table, and writes wait for the copy. migrate runs such a blocking step on a table
that has rows only with --allow-blocking; without it, it runs the online steps, then
stops with exit 1 naming the blocking one. The same holds for an online step the server
refuses to run online.

With relay.partitions > 1 it also adds the relay_partition column (VIRTUAL, CRC32 of
sharding_key modulo the number of partitions) and its index online, or replaces them when
the table was made for another number; with 1 it removes them.

--print-sql prints the statements migrate would run, marked online or BLOCKING, with
their ALTER clauses for gh-ost and pt-online-schema-change, and runs nothing: hand them to
Flyway, Liquibase or your DBA. --dedupe-table NAME also creates the consumer dedupe table
of package idempotency (SQL store). With --check nothing is changed: the differences are
listed and the exit code is 1 if there are any. With a databases list, every database's
tables are migrated (or those of --database); --dedupe-table then needs --database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check && printSQL {
				return usageError("migrate: --check and --print-sql do not go together")
			}
			for _, t := range dedupeTables {
				if err := schema.ValidateIdent(t); err != nil {
					return usageError("--dedupe-table: %v", err)
				}
			}
			dbs, err := a.openDatabases(cmd.Context(), dbName)
			if err != nil {
				return err
			}
			defer closeOpDatabases(dbs)
			if len(dedupeTables) > 0 && len(dbs) > 1 {
				return usageError("--dedupe-table: choose the database that gets it with --database")
			}
			var pending int
			for _, d := range dbs {
				n, err := a.migrateDatabase(cmd, d, migrateOptions{check, printSQL, allowBlocking, dedupeTables})
				pending += n
				if err != nil {
					return err
				}
			}
			if pending > 0 {
				return fmt.Errorf("%d table(s) need migrating: run outbox-relay migrate", pending)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "only report what migrate would change; exit 1 if anything")
	cmd.Flags().BoolVar(&printSQL, "print-sql", false, "print the DDL migrate would run (online or BLOCKING), run nothing")
	cmd.Flags().BoolVar(&allowBlocking, "allow-blocking", false, "also run steps that block writes on a table with rows (making id AUTO_INCREMENT)")
	cmd.Flags().StringArrayVar(&dedupeTables, "dedupe-table", nil, "also create this consumer dedupe table (package idempotency's SQL store; repeatable)")
	addDatabaseFlag(cmd, &dbName)
	return cmd
}

// migrateOptions are migrate's flags.
type migrateOptions struct {
	check, printSQL, allowBlocking bool
	dedupeTables                   []string
}

// migrateDatabase migrates (or checks, or prints) the tables of d and the dedupe tables, and
// returns how many tables o.check found out of date.
func (a *app) migrateDatabase(cmd *cobra.Command, d opDatabase, o migrateOptions) (pending int, err error) {
	ctx, db, out := cmd.Context(), d.db, cmd.OutOrStdout()
	if o.printSQL {
		fmt.Fprintf(out, "-- outbox-relay migrate --print-sql for %s: nothing was run.\n", d.Label())
	}
	for _, tbl := range d.Tables {
		table := d.qualified(tbl) // as printed; tbl is the table's name in SQL
		before, err := schema.CheckPartitioned(ctx, db, tbl, a.cfg.Relay.Partitions)
		if err != nil {
			return pending, fmt.Errorf("check table %s: %w", table, err)
		}
		if o.check {
			if len(before) == 0 {
				fmt.Fprintf(out, "%s: up to date\n", table)
				continue
			}
			pending++
			for _, p := range before {
				fmt.Fprintf(out, "%s: %s\n", table, p)
			}
			continue
		}
		steps, err := schema.PlanPartitioned(ctx, db, tbl, a.cfg.Relay.Partitions)
		if err != nil {
			return pending, err
		}
		if o.printSQL {
			printSteps(out, table, steps)
			continue
		}
		if len(steps) == 0 {
			fmt.Fprintf(out, "%s: up to date\n", table)
			continue
		}
		if err := schema.Apply(ctx, db, tbl, steps, o.allowBlocking); err != nil {
			if errors.Is(err, schema.ErrNotOnline) {
				return pending, fmt.Errorf("%w\nrun it in a maintenance window with `outbox-relay migrate --allow-blocking`, "+
					"or print the DDL with --print-sql for gh-ost or pt-online-schema-change", err)
			}
			return pending, err
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
	}
	for _, table := range o.dedupeTables {
		steps, err := schema.DedupePlan(ctx, db, table)
		switch {
		case err != nil:
			return pending, fmt.Errorf("dedupe table %s: %w", table, err)
		case o.printSQL:
			printSteps(out, table, steps)
		case o.check && len(steps) > 0:
			pending++
			fmt.Fprintf(out, "%s: missing dedupe table\n", table)
		case len(steps) == 0:
			fmt.Fprintf(out, "%s: dedupe table exists\n", table)
		case !o.check:
			if err := schema.Apply(ctx, db, table, steps, false); err != nil {
				return pending, err
			}
			fmt.Fprintf(out, "%s: dedupe table created\n", table)
		}
	}
	return pending, nil
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
		fmt.Fprintf(w, "%s;\n", strings.TrimSpace(st.SQL))
	}
}
