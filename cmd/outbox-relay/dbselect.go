// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// opDatabase is a database an operator command acts on, with its open pool.
type opDatabase struct {
	config.Database
	db *sql.DB
	// multi is set when the configuration lists databases: output then names each table's
	// database.
	multi bool
}

// qualified names table of d in output: shop-a/local_message, or the bare table in the
// single-database form.
func (d opDatabase) qualified(table string) string {
	if d.multi {
		return d.Name + "/" + table
	}
	return table
}

// dbName is the configured name reported in JSON: empty in the single-database form.
func (d opDatabase) dbName() string {
	if d.multi {
		return d.Name
	}
	return ""
}

// addDatabaseFlag defines --database on an operator command.
func addDatabaseFlag(cmd *cobra.Command, name *string) {
	cmd.Flags().StringVar(name, "database", "", "act on this database of the databases list only (default: every configured database)")
}

// selectDatabases returns the databases named by --database (every one when empty); an
// unknown name is a usage error listing the configured ones.
func (a *app) selectDatabases(name string) ([]config.Database, error) {
	dbs, err := a.cfg.SelectDatabases(name)
	if err != nil {
		return nil, usageError("%v", err)
	}
	return dbs, nil
}

// openDatabases opens and pings the databases named by --database (every one when empty).
// A database that cannot be reached fails the command, naming it; close the pools with
// closeOpDatabases.
func (a *app) openDatabases(ctx context.Context, name string) ([]opDatabase, error) {
	dbs, err := a.selectDatabases(name)
	if err != nil {
		return nil, err
	}
	var out []opDatabase
	for _, d := range dbs {
		od, err := a.openDatabase(ctx, d)
		if err != nil {
			closeOpDatabases(out)
			return nil, err
		}
		out = append(out, od)
	}
	return out, nil
}

// openDatabase opens and pings d; with a databases list, an error names it.
func (a *app) openDatabase(ctx context.Context, d config.Database) (opDatabase, error) {
	db, err := openMySQL(ctx, d.DSN)
	if err != nil && a.cfg.MultiDatabase() {
		err = fmt.Errorf("database %s: %w", d.Name, err)
	}
	return opDatabase{Database: d, db: db, multi: a.cfg.MultiDatabase()}, err
}

func closeOpDatabases(dbs []opDatabase) {
	for _, d := range dbs {
		d.db.Close()
	}
}
