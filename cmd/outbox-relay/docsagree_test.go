// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// userDocs returns the text of every file a user reads about the relay's behaviour.
func userDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../config.example.yaml")
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(b)
	}
	return out
}

// Row 18 of issue 26: the docs disagreed with each other and with the binary. The lock is
// extended every quarter of lock.ttl (relay's ticker), a status example cannot show more time
// left than the default TTL, and status does say which relay holds the lock.
func TestDocsAgreeOnTheLock(t *testing.T) {
	t.Parallel()
	extended := regexp.MustCompile(`(?is)extend\w*\s+(?:the lock\s+)?every\s+(\w+)\s+(?:of\s+)?(?:it|the ttl|` + "`lock.ttl`" + `)`)
	expires := regexp.MustCompile(`expires in (\d+(?:\.\d+)?)s`)
	ttl := config.Default().Lock.TTL
	quarters := 0
	for name, doc := range userDocs(t) {
		for _, m := range extended.FindAllStringSubmatch(doc, -1) {
			if strings.ToLower(m[1]) != "quarter" {
				t.Errorf("%s says the lock is extended every %s of its TTL; the relay extends it every quarter", name, m[1])
			}
			quarters++
		}
		for _, m := range expires.FindAllStringSubmatch(doc, -1) {
			if s, _ := strconv.ParseFloat(m[1], 64); time.Duration(s*float64(time.Second)) > ttl {
				t.Errorf("%s shows a lock that %s, more than the default lock.ttl (%s)", name, m[0], ttl)
			}
		}
		if strings.Contains(doc, "cannot say which relay holds") {
			t.Errorf("%s says status cannot say which relay holds the lock; it shows host and pid", name)
		}
	}
	if quarters < 3 {
		t.Errorf("only %d statements of how often the lock is extended found; the pattern no longer matches the docs", quarters)
	}
	b, err := os.ReadFile("../../scripts/rocketmq.sh")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "timerWheelEnable=false") && !strings.Contains(string(b), "mqadmin deleteTopic") {
		t.Error("scripts/rocketmq.sh turns the timer wheel off without saying that mqadmin deleteTopic then fails")
	}
}
