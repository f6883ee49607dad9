// SPDX-License-Identifier: Apache-2.0

package logging

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestJSONByDefault(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := New(&buf, "", "")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Msg("hidden")
	log.Info().Str("table", "local_message").Int("sent", 3).Msg("batch")
	var ev map[string]any
	if err := json.Unmarshal(buf.Bytes(), &ev); err != nil {
		t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
	}
	if ev["level"] != "info" || ev["message"] != "batch" || ev["table"] != "local_message" || ev["sent"] != 3.0 || ev["time"] == nil {
		t.Fatalf("event = %v", ev)
	}
}

func TestLevelAndFormat(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := New(&buf, "DEBUG", "console")
	if err != nil {
		t.Fatal(err)
	}
	log.Debug().Str("k", "v").Msg("shown")
	out := buf.String()
	if strings.HasPrefix(out, "{") || !strings.Contains(out, "shown") || !strings.Contains(out, "k=v") {
		t.Fatalf("console output = %q", out)
	}
	buf.Reset()
	log, _ = New(&buf, "warn", "json")
	log.Info().Msg("dropped")
	if buf.Len() != 0 {
		t.Fatalf("info logged at warn: %q", buf.String())
	}
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	if _, err := New(&bytes.Buffer{}, "loud", "json"); err == nil || !strings.Contains(err.Error(), "loud") {
		t.Fatalf("bad level: %v", err)
	}
	if _, err := New(&bytes.Buffer{}, "info", "xml"); err == nil || !strings.Contains(err.Error(), "xml") {
		t.Fatalf("bad format: %v", err)
	}
}

func TestAutoOnNonTerminalIsJSON(t *testing.T) {
	t.Parallel()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Fatal("a regular file is not a terminal")
	}
	log, _ := New(f, "info", "auto")
	log.Info().Msg("x")
	b, _ := os.ReadFile(f.Name())
	if !json.Valid(bytes.TrimSpace(b)) {
		t.Fatalf("auto on a file should be JSON: %q", b)
	}
}
