// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Logs are JSON only: the MySQL driver and go-redis print their own plain-text lines (a
// dropped connection, a failed dial) through package-level loggers, which forward to
// driverLog. The process's command line (execute, called by main) points driverLog at its
// zerolog logger once the configuration is loaded, and back at nothing when it returns;
// in-process test runs of a command leave it alone, so that parallel tests never write
// into each other's output.
//
// Field names of durations carry their unit (took_ms, ttl_ms, age_seconds); zerolog's Dur
// writes milliseconds, so Dur fields are named *_ms.
var driverLog atomic.Pointer[zerolog.Logger]

func init() {
	// Until the configuration is loaded (and in commands that do not load it), the drivers
	// stay quiet rather than write plain text.
	quietDrivers()
	_ = mysql.SetLogger(mysqlLogger{})
	redis.SetLogger(redisLogger{})
}

// useDriverLoggers sends the drivers' log lines to log, tagged with their component.
func useDriverLoggers(log zerolog.Logger) {
	driverLog.Store(&log)
}

// quietDrivers drops the drivers' log lines.
func quietDrivers() {
	nop := zerolog.Nop()
	driverLog.Store(&nop)
}

// mysqlLogger adapts go-sql-driver/mysql's Logger. The driver logs only what it recovers
// from (a bad idle connection, an unexpected EOF), so its lines are warnings.
type mysqlLogger struct{}

func (mysqlLogger) Print(v ...any) {
	driverLog.Load().Warn().Str("component", "mysql-driver").Msg(strings.TrimSpace(fmt.Sprint(v...)))
}

// redisLogger adapts go-redis's Logging; it too logs only failures it handles itself.
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	driverLog.Load().Warn().Str("component", "go-redis").Msg(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
