// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestClientWarningsFoldIntoOneDebugLine: the five warnings rocketmq-client-go writes per
// attempt for a missing topic (nine attempts: 45 lines) reach an info-level log not at all,
// and a debug-level log once per minute and topic, the next line counting the repeats.
func TestClientWarningsFoldIntoOneDebugLine(t *testing.T) {
	t.Parallel()
	attempts := func(c clientLogger) {
		for range 9 {
			c.Warning("query topic route from server error", map[string]interface{}{"underlayError": "topic not exist"})
			c.Warning("queryTopicRouteInfoFromServer return nil", map[string]interface{}{"topic": "orderz"})
			c.Warning("queryTopicRouteInfoFromServer return nil", map[string]interface{}{"topic": "orderz"})
			c.Warning("fetch publish info error", map[string]interface{}{"topic": "orderz"})
			c.Warning("send message error", map[string]interface{}{"topic": "orderz"})
		}
	}
	var info bytes.Buffer
	attempts(newClientLogger(zerolog.New(&info).Level(zerolog.InfoLevel), time.Now))
	if info.Len() != 0 {
		t.Fatalf("client warnings at info level:\n%s", info.String())
	}

	var debug bytes.Buffer
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	c := newClientLogger(zerolog.New(&debug).Level(zerolog.DebugLevel), func() time.Time { return now })
	attempts(c)
	lines := strings.Split(strings.TrimSpace(debug.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines for 45 warnings of one incident, want 4 (one per distinct line):\n%s", len(lines), debug.String())
	}
	for _, l := range lines {
		if !strings.Contains(l, `"level":"debug"`) || !strings.Contains(l, `"client_level":"warn"`) {
			t.Errorf("not a debug line marked client_level warn: %s", l)
		}
	}
	now = now.Add(foldWindow)
	debug.Reset()
	c.Warning("send message error", map[string]interface{}{"topic": "orderz"})
	if got := debug.String(); !strings.Contains(got, `"repeated":8`) {
		t.Fatalf("after the window: %q, want the line again with repeated 8", got)
	}
}
