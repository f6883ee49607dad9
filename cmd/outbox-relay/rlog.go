// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/rs/zerolog"
)

// clientLogger sends rocketmq-client-go's log lines to our logger, so one process writes one
// format. The relay reports every broker incident itself, in one line that says what
// happens to the rows (a missing topic, a broker down); the client's own lines about the
// same incident (five warnings per attempt for a missing topic: 45 lines in 12 s for one
// row) would bury it. So the client's info and warning lines go to debug, and a line the
// client repeats (same message, same topic) is written once per foldWindow, the next time
// with the number of repeats left out. Its errors stay errors, folded the same way.
type clientLogger struct {
	log  zerolog.Logger
	fold *folder
}

// foldWindow is how long a repeated client line stays folded.
const foldWindow = time.Minute

func useClientLogger(log zerolog.Logger) {
	rlog.SetLogger(newClientLogger(log, time.Now))
}

func newClientLogger(log zerolog.Logger, now func() time.Time) clientLogger {
	return clientLogger{
		log:  log.With().Str("component", "rocketmq-client").Logger(),
		fold: &folder{now: now, seen: map[string]*folded{}},
	}
}

// folder counts the client's repeated lines. now is the clock (injected in tests).
type folder struct {
	now  func() time.Time
	mu   sync.Mutex
	seen map[string]*folded
}

type folded struct {
	since    time.Time
	repeated int
}

// admit reports whether a line keyed key is written now, and how many of its repeats were
// left out since it was last written.
func (f *folder) admit(key string) (bool, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if e, ok := f.seen[key]; ok && now.Sub(e.since) < foldWindow {
		e.repeated++
		return false, 0
	}
	n := 0
	if e, ok := f.seen[key]; ok {
		n = e.repeated
	}
	if len(f.seen) > 1000 { // a client that varies its messages without end: start again
		clear(f.seen)
	}
	f.seen[key] = &folded{since: now}
	return true, n
}

func (c clientLogger) emit(e *zerolog.Event, level, msg string, fields map[string]interface{}) {
	if !e.Enabled() {
		return
	}
	ok, repeated := c.fold.admit(fmt.Sprint(level, "\x00", msg, "\x00", fields["topic"], fields["Topic"]))
	if !ok {
		return
	}
	if repeated > 0 {
		e = e.Int("repeated", repeated)
	}
	e.Str("client_level", level).Fields(fields).Msg(msg)
}

func (c clientLogger) Debug(msg string, fields map[string]interface{}) {
	c.emit(c.log.Debug(), "debug", msg, fields)
}

func (c clientLogger) Info(msg string, fields map[string]interface{}) {
	c.emit(c.log.Debug(), "info", msg, fields)
}

func (c clientLogger) Warning(msg string, fields map[string]interface{}) {
	c.emit(c.log.Debug(), "warn", msg, fields)
}

func (c clientLogger) Error(msg string, fields map[string]interface{}) {
	c.emit(c.log.Error(), "error", msg, fields)
}

func (c clientLogger) Fatal(msg string, fields map[string]interface{}) {
	// The client calls Fatal for errors it survives; never exit the process for it.
	c.emit(c.log.Error(), "fatal", msg, fields)
}

func (c clientLogger) Level(string) {}

func (c clientLogger) OutputPath(string) error { return nil }
