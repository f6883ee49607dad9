// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// jsonLines fails unless every line of s is a JSON object, and returns them.
func jsonLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		out = append(out, m)
	}
	return out
}

// process runs the command line as main does (execute), which owns the process-wide driver
// loggers; stdout and stderr are safe for the drivers' goroutines to write.
func process(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut testenv.SyncBuffer
	code := execute(context.Background(), args, strings.NewReader(""), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// Logs are JSON only: the MySQL driver's and go-redis's own complaints come through zerolog,
// and so does the relay's reason for exiting. Not parallel: the drivers' loggers are global.
func TestDriverLogsAreJSON(t *testing.T) {
	// A server that accepts and hangs up: the MySQL driver logs the unexpected EOF itself.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	r := process(t, "run", "--log-format=json", "--mysql-dsn=root:@tcp("+ln.Addr().String()+")/x")
	if r.code != exitRuntime {
		t.Fatalf("run against a hanging-up server: %+v", r)
	}
	lines := jsonLines(t, r.errOut)
	var driver, last map[string]any
	for _, m := range lines {
		if m["component"] == "mysql-driver" {
			driver = m
		}
		last = m
	}
	if driver == nil || driver["level"] != "warn" {
		t.Errorf("no mysql-driver line in the log:\n%s", r.errOut)
	}
	if last == nil || last["level"] != "error" || !strings.Contains(last["error"].(string), ln.Addr().String()) {
		t.Errorf("last line is not the reason for exiting:\n%s", r.errOut)
	}

	// status with Redis down: go-redis's dial failures are JSON warnings, the output a table.
	_, dsn := migrated(t)
	r = process(t, "status", dsn, "--log-format=json", "--redis-addr=127.0.0.1:1")
	if r.code != 0 {
		t.Fatalf("status: %+v", r)
	}
	redisLines := 0
	for _, m := range jsonLines(t, r.errOut) {
		if m["component"] == "go-redis" {
			redisLines++
		}
	}
	if redisLines == 0 {
		t.Errorf("no go-redis line in the log:\n%s", r.errOut)
	}
}
