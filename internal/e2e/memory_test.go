// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// chartMemoryLimit returns the memory limit of the relay container in the Helm chart
// (deploy/helm/outbox-relay/values.yaml, resources.limits.memory), in bytes.
func chartMemoryLimit(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy/helm/outbox-relay/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Resources struct {
			Limits struct{ Memory string }
		}
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	q := values.Resources.Limits.Memory
	for suffix, unit := range map[string]int{"Mi": 1 << 20, "Gi": 1 << 30} {
		if n, err := strconv.Atoi(strings.TrimSuffix(q, suffix)); err == nil && strings.HasSuffix(q, suffix) {
			return n * unit
		}
	}
	t.Fatalf("the chart's resources.limits.memory %q is not in Mi or Gi", q)
	return 0
}

// peakRSSKB is process pid's peak resident memory in KiB (VmHWM).
func peakRSSKB(t *testing.T, pid int) int { return procStatusKB(t, pid, "VmHWM") }

// TestLargeBodiesStayUnderTheMemoryLimit: a backlog of 60 legal bodies of 3.8 MB (under
// relay.max_body_bytes, random so that compression saves little) is delivered, each row once,
// by a relay run with the Helm chart's memory limit (as relay.memory_limit, which the chart's
// container gets from its cgroup), whose peak RSS stays under that limit: the memory budget
// holds back reading while bodies are in flight.
func TestLargeBodiesStayUnderTheMemoryLimit(t *testing.T) {
	limit := chartMemoryLimit(t)
	e := newEnv(t)
	const n, size = 60, 3_800_000
	raw := make([]byte, size*3/4)
	for i := 0; i < n; i++ {
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		m := outbox.Message{MsgID: fmt.Sprintf("large-%02d", i), Topic: "large", Body: []byte(base64.StdEncoding.EncodeToString(raw))}
		if err := e.writer.InsertNoTx(context.Background(), e.db.DB, []outbox.Message{m}); err != nil {
			t.Fatal(err)
		}
	}
	// A send of 3.8 MB to the test's broker may take more than the tests' usual 1 s.
	p := e.startRelay(t, "OUTBOX_RELAY_MEMORY_LIMIT="+strconv.Itoa(limit), "OUTBOX_ROCKETMQ_SEND_TIMEOUT=10s")
	eventually(t, 120*time.Second, "every large row sent", func() bool { return e.count(t, "status = 2") == n })
	peak := peakRSSKB(t, p.Cmd.Process.Pid)
	if testing.Verbose() {
		for _, l := range jsonLogLines(p.Out.String()) {
			if m, _ := l["message"].(string); strings.HasPrefix(m, "memory:") {
				t.Log(l)
			}
		}
	}
	t.Logf("%d bodies of %d bytes sent; the relay's peak RSS: %d MiB (limit %d MiB)", n, size, peak>>10, limit>>20)
	ids := map[string]bool{}
	for _, m := range e.broker.Messages("large") {
		ids[m.Properties[outbox.MsgIDProperty]] = true
	}
	if len(ids) != n {
		t.Errorf("the broker holds %d distinct messages of the %d rows", len(ids), n)
	}
	if peak<<10 >= limit {
		t.Errorf("the relay's peak RSS is %d MiB, not under the memory limit of %d MiB", peak>>10, limit>>20)
	}
}

// TestConcurrentMetricsScrapesStayBounded: 1,000 concurrent unauthenticated GET /metrics
// (each on a connection of its own, asking for gzip as Prometheus does) all get the page,
// while the relay's resident memory grows by less than 40 MiB over its idle figure (1,000
// connections cost about 25 MiB; with a rendering per request it grew by 61 to 102 MiB).
func TestConcurrentMetricsScrapesStayBounded(t *testing.T) {
	const clients = 1000
	raiseFDLimit(t, clients+256)
	e := newEnv(t)
	p := e.startRelay(t)
	listening(t, p)
	addr, pid := p.httpAddr(), p.Cmd.Process.Pid
	e.insertN(t, "scrape", 50) // a page of real series
	eventually(t, 30*time.Second, "the rows published", func() bool { return e.count(t, "status = 2") == 50 })
	idle := peakRSSKB(t, pid)
	var wg sync.WaitGroup
	var ok atomic.Int64
	start := make(chan struct{})
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			<-start
			resp, err := c.Get("http://" + addr + "/metrics")
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if b, err := io.ReadAll(resp.Body); err == nil && resp.StatusCode == 200 && strings.Contains(string(b), "outbox_relay_") {
				ok.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	peak := peakRSSKB(t, pid)
	t.Logf("%d of %d concurrent scrapes answered; the relay's peak RSS: %d MiB (idle %d MiB)", ok.Load(), clients, peak>>10, idle>>10)
	if ok.Load() < clients*99/100 {
		t.Errorf("only %d of %d scrapes got the page", ok.Load(), clients)
	}
	if grown := (peak - idle) >> 10; grown >= 40 {
		t.Errorf("the relay's peak RSS grew by %d MiB under %d concurrent scrapes (to %d MiB), want under 40 MiB (the connections themselves cost about 25)", grown, clients, peak>>10)
	}
}
