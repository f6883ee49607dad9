// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"strings"

	"github.com/go-sql-driver/mysql"
)

// NudgeChannelIn is the Redis pub/sub channel of table's relay in database, database being
// the label of the relay's mysql.dsn (DatabaseLabel; `outbox-relay status` prints it after
// the table's name): "outbox-relay:nudge:10.0.0.5:3306/shop:local_message". Two services
// with a table of the same name sharing one Redis each wake only their own relay. The relay
// listens on it and also, for writers that name no database, on NudgeChannel(table).
func NudgeChannelIn(database, table string) string {
	if database == "" {
		return NudgeChannel(table)
	}
	return "outbox-relay:nudge:" + database + ":" + table
}

// DatabaseLabel returns the identity of the database a go-sql-driver/mysql DSN points at, as
// server and schema without credentials or parameters: "127.0.0.1:3306/shop" for TCP (the
// driver's defaults filled in, the host lower-cased), "unix(/run/mysqld/mysqld.sock)/shop"
// for a socket. The relay names the database with it in its lock key, its nudge channel
// (NudgeChannelIn), its metric labels and its status output. An unparsable DSN gives "".
//
// Two DSNs naming the same server differently (localhost and 127.0.0.1, a host name and its
// address) give different labels: a writer nudging from a DSN of its own must spell the
// server as the relay's mysql.dsn does.
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
