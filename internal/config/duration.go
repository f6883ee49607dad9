// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const durationHint = "must be a duration with a unit such as 500ms, 10s, 5m, 2h or 7d"

// days matches a number of days ("7d", "1.5d") inside a duration string; no other unit of
// time.ParseDuration contains a "d".
var days = regexp.MustCompile(`(\d+\.?\d*|\.\d+)d`)

// ParseDuration parses a duration as time.ParseDuration does ("1.5s", "10m", "168h"), and
// also accepts days, alone or combined: "7d", "1d12h" (a day is 24 hours). Surrounding
// spaces are ignored. Every duration of the configuration and of the CLI's flags goes
// through it.
func ParseDuration(s string) (time.Duration, error) {
	// The matches are well-formed numbers, and a number of days too large for a Duration
	// makes time.ParseDuration fail.
	hours := days.ReplaceAllStringFunc(strings.TrimSpace(s), func(m string) string {
		n, _ := strconv.ParseFloat(strings.TrimSuffix(m, "d"), 64)
		return strconv.FormatFloat(n*24, 'f', -1, 64) + "h"
	})
	d, err := time.ParseDuration(hours)
	if err != nil {
		return 0, fmt.Errorf("%s, got %q", durationHint, s)
	}
	return d, nil
}

// Duration is a pflag.Value for duration flags that accepts days (see ParseDuration).
// Its String is what was given, so viper reads the flag back through ParseDuration.
type Duration struct {
	d   *time.Duration
	raw string
}

// NewDuration returns a Duration flag value storing into p, which starts at def.
func NewDuration(p *time.Duration, def time.Duration) *Duration {
	*p = def
	return &Duration{d: p, raw: fmtDuration(def)}
}

// Set parses s with ParseDuration.
func (v *Duration) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d, v.raw = d, strings.TrimSpace(s)
	return nil
}

// String returns the value as given (or the default, formatted).
func (v *Duration) String() string { return v.raw }

// Type names the flag's type in help output.
func (v *Duration) Type() string { return "duration" }
