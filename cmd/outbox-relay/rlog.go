// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/rs/zerolog"
)

// clientLogger sends rocketmq-client-go's log lines to our logger, so one process writes one
// format. The client is chatty at info (every route refresh), so its lines below warn are
// passed on only when the process runs at debug.
type clientLogger struct{ log zerolog.Logger }

func useClientLogger(log zerolog.Logger) {
	rlog.SetLogger(clientLogger{log: log.With().Str("component", "rocketmq-client").Logger()})
}

func (c clientLogger) emit(e *zerolog.Event, msg string, fields map[string]interface{}) {
	e.Fields(fields).Msg(msg)
}

func (c clientLogger) Debug(msg string, fields map[string]interface{}) {
	c.emit(c.log.Debug(), msg, fields)
}

func (c clientLogger) Info(msg string, fields map[string]interface{}) {
	c.emit(c.log.Debug(), msg, fields)
}

func (c clientLogger) Warning(msg string, fields map[string]interface{}) {
	c.emit(c.log.Warn(), msg, fields)
}

func (c clientLogger) Error(msg string, fields map[string]interface{}) {
	c.emit(c.log.Error(), msg, fields)
}

func (c clientLogger) Fatal(msg string, fields map[string]interface{}) {
	// The client calls Fatal for errors it survives; never exit the process for it.
	c.emit(c.log.Error(), msg, fields)
}

func (c clientLogger) Level(string) {}

func (c clientLogger) OutputPath(string) error { return nil }
