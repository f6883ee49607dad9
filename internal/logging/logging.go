// SPDX-License-Identifier: Apache-2.0

// Package logging builds the sidecar's zerolog logger: JSON lines by default, for log
// shippers, and a human console format when a person is watching a terminal.
package logging

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"
)

// Formats accepted by New.
const (
	// FormatAuto picks FormatConsole when w is a terminal and FormatJSON otherwise.
	FormatAuto    = ""
	FormatJSON    = "json"
	FormatConsole = "console"
)

// New returns a logger writing to w at level (a zerolog level name such as "debug" or
// "info"; empty means info) in format: "json", "console", or "" / "auto" to choose console
// when w is a terminal (an *os.File on a TTY) and JSON otherwise. Every event carries a
// timestamp. An unknown level or format is an error naming it.
func New(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl := zerolog.InfoLevel
	if level = strings.ToLower(strings.TrimSpace(level)); level != "" {
		var err error
		lvl, err = zerolog.ParseLevel(level)
		if err != nil {
			return zerolog.Nop(), fmt.Errorf("log level %q: must be one of trace, debug, info, warn, error, fatal, panic, disabled", level)
		}
	}
	tty := IsTerminal(w)
	switch strings.ToLower(strings.TrimSpace(format)) {
	case FormatAuto, "auto":
		if tty {
			w = console(w, tty)
		}
	case FormatJSON:
	case FormatConsole:
		w = console(w, tty)
	default:
		return zerolog.Nop(), fmt.Errorf("log format %q: must be json or console", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func console(w io.Writer, color bool) io.Writer {
	return zerolog.ConsoleWriter{Out: w, NoColor: !color, TimeFormat: time.DateTime}
}

// IsTerminal reports whether w is an *os.File attached to a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}
