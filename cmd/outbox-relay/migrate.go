package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/schema"
)

func (a *app) newMigrateCmd() *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the outbox table(s)",
		Long: `Create each configured outbox table, or upgrade one made with the original
local_message DDL in place (missing columns and indexes are added; rows are kept).
Running it again on an up-to-date table changes nothing. With --check nothing is changed:
the differences are listed and the exit code is 1 if there are any.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			db, err := a.openDB(ctx)
			if err != nil {
				return err
			}
			defer db.Close()
			out := cmd.OutOrStdout()
			var pending int
			for _, table := range a.cfg.Tables() {
				before, err := schema.Check(ctx, db, table)
				if err != nil {
					return fmt.Errorf("check table %s: %w", table, err)
				}
				if len(before) == 0 {
					fmt.Fprintf(out, "%s: up to date\n", table)
					continue
				}
				if check {
					pending++
					for _, p := range before {
						fmt.Fprintf(out, "%s: %s\n", table, p)
					}
					continue
				}
				if err := schema.Migrate(ctx, db, table); err != nil {
					return fmt.Errorf("migrate table %s: %w", table, err)
				}
				if len(before) == 1 && before[0].Kind == "missing table" {
					fmt.Fprintf(out, "%s: created\n", table)
				} else {
					fmt.Fprintf(out, "%s: upgraded (%d change(s))\n", table, len(before))
					for _, p := range before {
						fmt.Fprintf(out, "  fixed: %s\n", p)
					}
				}
				a.log.Info().Str("table", table).Int("changes", len(before)).Msg("migrated")
			}
			if pending > 0 {
				return fmt.Errorf("%d table(s) need migrating: run outbox-relay migrate", pending)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "only report what migrate would change; exit 1 if anything")
	return cmd
}
