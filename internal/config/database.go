package config

import (
	"strings"

	"github.com/go-sql-driver/mysql"
)

// DatabaseLabel returns the identity of the database a go-sql-driver/mysql DSN points at, as
// server and schema without credentials or parameters: "127.0.0.1:3306/shop" for TCP (the
// driver's defaults filled in, the host lower-cased), "unix(/run/mysqld/mysqld.sock)/shop"
// for a socket. It names the database in the default lock key, in metric labels and in
// status output. An unparsable DSN gives "".
//
// Two DSNs naming the same server differently (localhost and 127.0.0.1, a host name and its
// address) give different labels: every replica of one relay must use the same spelling.
func DatabaseLabel(dsn string) string {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return ""
	}
	server := mc.Addr
	switch mc.Net {
	case "", "tcp", "tcp4", "tcp6":
		server = strings.ToLower(mc.Addr)
	default:
		server = mc.Net + "(" + mc.Addr + ")"
	}
	return server + "/" + mc.DBName
}

// DatabaseLabel returns DatabaseLabel of the configured mysql.dsn.
func (c Config) DatabaseLabel() string { return DatabaseLabel(c.MySQL.DSN) }

// LockKey returns the leader-lock key of table: lock.key with {db} replaced by the
// database's label (see DatabaseLabel) and {table} by table.
func (c Config) LockKey(table string) string {
	return c.Lock.KeyFor(c.DatabaseLabel(), table)
}
