// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// status shows per table whether a relay holds the leader lock, and the time it has left.
func TestStatusShowsTheLock(t *testing.T) {
	t.Parallel()
	_, dsn := migrated(t)
	rdb, prefix := testenv.Redis(t)
	file := filepath.Join(t.TempDir(), "relay.yaml")
	yaml := "redis: {addr: '" + testenv.RedisAddr() + "'}\nlock: {key: '" + prefix + "lock:{db}:{table}'}\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	status := func() ops.StatusReport {
		t.Helper()
		r := cli(t, "", false, "status", "--json", dsn, "--config="+file)
		var reports []ops.StatusReport
		if err := json.Unmarshal([]byte(r.out), &reports); err != nil || r.code != 0 || len(reports) != 1 || reports[0].Lock == nil {
			t.Fatalf("status --json: %v %+v", err, r)
		}
		return reports[0]
	}
	st := status()
	label := config.DatabaseLabel(strings.TrimPrefix(dsn, "--mysql-dsn="))
	wantKey := prefix + "lock:" + label + ":local_message"
	if st.Database != label || st.Lock.Key != wantKey || st.Lock.Held || st.Lock.Error != "" {
		t.Fatalf("free lock: database %q, lock %+v; want key %s", st.Database, *st.Lock, wantKey)
	}
	if r := cli(t, "", false, "status", dsn, "--config="+file); r.code != 0 || !regexp.MustCompile(`\n  lock\s+free \(`).MatchString(r.out) {
		t.Fatalf("status text, free lock:\n%s", r.out)
	}

	// A relay holds it (redsync stores a random token with a TTL).
	if err := rdb.Set(context.Background(), wantKey, "c2VjcmV0LXRva2Vu", 8*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	st = status()
	if !st.Lock.Held || st.Lock.TTLMillis <= 0 || st.Lock.TTLMillis > 8000 {
		t.Fatalf("held lock: %+v", *st.Lock)
	}
	r := cli(t, "", false, "status", dsn, "--config="+file)
	if r.code != 0 || !regexp.MustCompile(`\n  lock\s+held, expires in \d`).MatchString(r.out) || strings.Contains(r.out, "c2VjcmV0LXRva2Vu") {
		t.Fatalf("status text, held lock:\n%s", r.out)
	}

	// Redis down: the counts still print, the lock is unknown.
	r = cli(t, "", false, "status", dsn, "--redis-addr=127.0.0.1:1")
	if r.code != 0 || !regexp.MustCompile(`\n  lock\s+unknown \(`).MatchString(r.out) || !strings.Contains(r.out, "pending") {
		t.Fatalf("status with Redis down:\n%+v", r)
	}
}
