// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

var envReplacer = strings.NewReplacer(".", "_")

func upper(s string) string { return strings.ToUpper(s) }

// flagKeys maps each command-line flag to the key it sets. Secrets other than the DSN have no
// flag on purpose: command lines are visible to every user of the host (ps, /proc).
var flagKeys = []struct {
	name, key, usage string
}{
	{"mysql-dsn", KeyMySQLDSN, "MySQL DSN (prefer OUTBOX_MYSQL_DSN: flags are visible in ps)"},
	{"table", KeyMySQLTable, "outbox table; overrides mysql.tables when given"},
	{"tables", KeyMySQLTables, "several outbox tables, comma-separated"},
	{"redis-addr", KeyRedisAddr, "Redis address host:port"},
	{"redis-db", KeyRedisDB, "Redis database number"},
	{"nameservers", KeyRocketMQNameServers, "RocketMQ name servers, comma-separated host:port"},
	{"group", KeyRocketMQGroup, "RocketMQ producer group"},
	{"poll-interval", KeyRelayPollInterval, "interval between scans for due rows"},
	{"batch-size", KeyRelayBatchSize, "rows per batch"},
	{"concurrency", KeyRelayConcurrency, "publishing goroutines"},
	{"http-addr", KeyHTTPAddr, "listen address for /metrics, /healthz, /readyz"},
	{"log-level", KeyLogLevel, "log level: trace, debug, info, warn, error"},
	{"log-format", KeyLogFormat, "log format: json or console (default: json, console on a terminal)"},
}

// AddFlags defines the configuration flags on fs (usually a command's persistent flags).
// Their defaults are shown for help only: a flag counts only when given.
func AddFlags(fs *pflag.FlagSet) {
	def := map[string]any{}
	for _, d := range defaults {
		def[d.key] = d.val
	}
	for _, f := range flagKeys {
		usage := fmt.Sprintf("%s (%s, env %s)", f.usage, f.key, EnvName(f.key))
		switch d := def[f.key].(type) {
		case string:
			fs.String(f.name, d, usage)
		case int:
			fs.Int(f.name, d, usage)
		case time.Duration:
			fs.Var(NewDuration(new(time.Duration), d), f.name, usage)
		case []string:
			fs.StringSlice(f.name, d, usage)
		default:
			panic(fmt.Sprintf("config: no flag type for %s (%T)", f.key, d))
		}
	}
}

// BindFlags binds the flags defined by AddFlags on fs to their keys in v.
func BindFlags(v *viper.Viper, fs *pflag.FlagSet) error {
	for _, f := range flagKeys {
		fl := fs.Lookup(f.name)
		if fl == nil {
			continue
		}
		if err := v.BindPFlag(f.key, fl); err != nil {
			return fmt.Errorf("bind flag --%s: %w", f.name, err)
		}
	}
	return nil
}

// FlagName returns the command-line flag that sets key, or "" if it has none.
func FlagName(key string) string {
	for _, f := range flagKeys {
		if f.key == key {
			return f.name
		}
	}
	return ""
}
