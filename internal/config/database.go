// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// DefaultDatabaseName is the name of the one database of the single-database form
// (mysql.dsn with mysql.table or mysql.tables), as EffectiveDatabases returns it.
const DefaultDatabaseName = "default"

// Database is one database relayed by the process: an entry of databases, or the
// single-database form (mysql.*) as EffectiveDatabases returns it.
type Database struct {
	// Name identifies the database in logs, in /readyz and in the CLI's --database
	// (databases[].name): lower-case letters, digits, "-" and "_", at most 32 characters,
	// unique. Required.
	Name string
	// DSN is its go-sql-driver/mysql DSN (databases[].dsn), or the value of
	// OUTBOX_DATABASES_<NAME>_DSN, which wins over the file. Required. Secret: print it only
	// through RedactDSN.
	DSN string
	// Tables are its outbox tables (databases[].tables). Defaults to [local_message].
	Tables []string
}

// Label returns DatabaseLabel of the database's DSN: server and schema, no credentials.
func (d Database) Label() string { return DatabaseLabel(d.DSN) }

// DatabaseEnvName returns the environment variable holding the DSN of the database named
// name: OUTBOX_DATABASES_<NAME>_DSN, the name upper-cased with "-" written "_".
func DatabaseEnvName(name string) string {
	return EnvPrefix + "_DATABASES_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_DSN"
}

var databaseName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// EffectiveDatabases returns the databases to relay, each with its tables: the databases
// list when set, else the single-database form as one Database named DefaultDatabaseName.
// Every part of the binary walks this list, whichever form the configuration uses.
func (c Config) EffectiveDatabases() []Database {
	if len(c.Databases) == 0 {
		return []Database{{Name: DefaultDatabaseName, DSN: c.MySQL.DSN, Tables: c.Tables()}}
	}
	out := make([]Database, len(c.Databases))
	for i, d := range c.Databases {
		d.Tables = slices.Clone(d.Tables)
		out[i] = d
	}
	return out
}

// MultiDatabase reports whether the configuration uses the databases list (even of one
// entry) rather than the single-database form: names then qualify tables in output.
func (c Config) MultiDatabase() bool { return len(c.Databases) > 0 }

// SelectDatabases returns the database named name, or every database when name is empty.
// An unknown name is an error listing the configured ones.
func (c Config) SelectDatabases(name string) ([]Database, error) {
	all := c.EffectiveDatabases()
	if name == "" {
		return all, nil
	}
	names := make([]string, len(all))
	for i, d := range all {
		if d.Name == name {
			return []Database{d}, nil
		}
		names[i] = d.Name
	}
	return nil, fmt.Errorf("--database %s: no such database (configured: %s)", name, strings.Join(names, ", "))
}

// DatabaseLabel returns the identity of the database a go-sql-driver/mysql DSN points at, as
// server and schema without credentials or parameters: "127.0.0.1:3306/shop" for TCP (the
// driver's defaults filled in, the host lower-cased), "unix(/run/mysqld/mysqld.sock)/shop"
// for a socket. It names the database in the default lock key, in metric labels and in
// status output. An unparsable DSN gives "".
//
// Two DSNs naming the same server differently (localhost and 127.0.0.1, a host name and its
// address) give different labels: every replica of one relay must use the same spelling.
func DatabaseLabel(dsn string) string { return outbox.DatabaseLabel(dsn) }

// DatabaseLabel returns DatabaseLabel of the configured mysql.dsn (the single-database form).
func (c Config) DatabaseLabel() string { return DatabaseLabel(c.MySQL.DSN) }

// LockKey returns the leader-lock key of table in the single-database form: see LockKeyIn.
func (c Config) LockKey(table string) string {
	return c.Lock.KeyFor(c.DatabaseLabel(), table)
}

// LockKeyIn returns the leader-lock key of table of db: lock.key with {db} replaced by the
// database's label (see DatabaseLabel, never its name or credentials) and {table} by table.
func (c Config) LockKeyIn(db Database, table string) string {
	return c.Lock.KeyFor(db.Label(), table)
}

// dsnProblem says what is wrong with a DSN, or "" when the driver accepts it and it names a
// schema. The driver's messages do not echo the DSN, so no password leaks into the error.
func dsnProblem(dsn string) string {
	if dsn == "" {
		return "must not be empty"
	}
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "invalid DSN: " + err.Error() + dsnHint(dsn)
	}
	if mc.DBName == "" {
		return "names no database: end it with /<schema>, e.g. user:password@tcp(host:3306)/shop"
	}
	return ""
}

// dsnForm is the DSN form the MySQL driver takes, as every hint spells it.
const dsnForm = "user:password@tcp(host:port)/db"

// dsnHint names the form the driver expects after its own message, which rarely says what
// to change (`host:port` without tcp(...) gives "default addr for network ... unknown").
// It echoes nothing of the DSN, so no password reaches the error.
func dsnHint(dsn string) string {
	if i := strings.Index(dsn, "://"); i > 0 && !strings.ContainsAny(dsn[:i], "@:/(") {
		return fmt.Sprintf("; a %s:// URL is not a DSN: write it as %s, e.g. app:secret@tcp(db:3306)/shop", dsn[:i], dsnForm)
	}
	return fmt.Sprintf("; expected %s, the address inside tcp(...), e.g. app:secret@tcp(db:3306)/shop", dsnForm)
}

// databaseProblems checks the databases list: names, DSNs, tables, and that it is not mixed
// with the single-database form.
func (c Config) databaseProblems(bad func(key, format string, args ...any)) {
	if len(c.Databases) == 0 {
		return
	}
	var mixed []string
	if c.MySQL.DSN != defaultString(KeyMySQLDSN) {
		mixed = append(mixed, KeyMySQLDSN)
	}
	if c.MySQL.Table != defaultString(KeyMySQLTable) {
		mixed = append(mixed, KeyMySQLTable)
	}
	if len(c.MySQL.Tables) > 0 {
		mixed = append(mixed, KeyMySQLTables)
	}
	if len(mixed) > 0 {
		bad(KeyDatabases, "cannot be combined with %s (the single-database form): move them into a databases entry",
			strings.Join(mixed, ", "))
	}
	names := map[string]int{}
	envs := map[string]int{}
	labels := map[string]int{}
	for i, d := range c.Databases {
		key := fmt.Sprintf("%s[%d]", KeyDatabases, i)
		switch {
		case d.Name == "":
			bad(key+".name", "must not be empty")
		case !databaseName.MatchString(d.Name):
			bad(key+".name", "must be lower-case letters, digits, - and _ (starting with a letter or digit, at most 32), got %q", d.Name)
		case hasKey(names, d.Name):
			bad(key+".name", "duplicate name %q (also databases[%d])", d.Name, names[d.Name])
		case hasKey(envs, DatabaseEnvName(d.Name)):
			bad(key+".name", "%q and databases[%d].name share the environment variable %s: rename one", d.Name, envs[DatabaseEnvName(d.Name)], DatabaseEnvName(d.Name))
		default:
			names[d.Name], envs[DatabaseEnvName(d.Name)] = i, i
		}
		switch p := dsnProblem(d.DSN); {
		case d.DSN == "":
			bad(key+".dsn", "missing: set it here or in the environment variable %s", DatabaseEnvName(d.Name))
		case p != "":
			bad(key+".dsn", "%s", p)
		case hasKey(labels, d.Label()):
			bad(key+".dsn", "same database as databases[%d] (%s): list each database once, with all its tables", labels[d.Label()], d.Label())
		default:
			labels[d.Label()] = i
		}
		tableProblems(bad, key+".tables", d.Tables)
		if len(d.Tables) == 0 {
			bad(key+".tables", "must list at least one table")
		}
	}
}

func hasKey(m map[string]int, k string) bool {
	_, ok := m[k]
	return ok
}

// tableProblems checks a list of table names under key (key[i] names each).
func tableProblems(bad func(key, format string, args ...any), key string, tables []string) {
	seen := map[string]bool{}
	for i, t := range tables {
		k := fmt.Sprintf("%s[%d]", key, i)
		if err := schema.ValidateIdent(t); err != nil {
			bad(k, "%v", err)
		} else if seen[strings.ToLower(t)] {
			bad(k, "duplicate table %q", t)
		}
		seen[strings.ToLower(t)] = true
	}
}
