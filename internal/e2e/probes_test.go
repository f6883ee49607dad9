// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"
)

// slowReader dials addr with a small receive buffer, asks for path and never reads the
// answer; it holds the connection for hold, then dials again, until ctx ends.
func slowReader(ctx context.Context, addr, path string, hold time.Duration) {
	d := net.Dialer{Timeout: time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
	}}
	for ctx.Err() == nil {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			continue
		}
		_, _ = io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		c.Close()
	}
}

// TestHealthzAnswersUnderSlowReaders: 1,024 clients that ask for the dashboard's overview of
// a table with 4,000 topics (forged tombstones) and never read it, dialling again as soon as
// they are cut, hold every connection of http.max_connections; the kubelet's /healthz probes
// (1 s timeout) still get their answer, at least 47 of 48.
func TestHealthzAnswersUnderSlowReaders(t *testing.T) {
	const readers, probes = 1024, 48
	raiseFDLimit(t, 2*readers+256)
	e := newEnv(t)
	if _, err := e.db.Exec("INSERT INTO local_message (msg_id, topic, content, status, is_deleted, fail_reason) " +
		"SELECT CONCAT('forged-', seq), CONCAT('forged-topic-', REPEAT('x', 100), '-', seq), '', 3, 1, 'fenced by a transactional check' FROM seq_1_to_30000"); err != nil {
		t.Fatal(err)
	}
	p := e.startRelay(t)
	listening(t, p)
	addr := p.httpAddr()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := 0; i < readers; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); slowReader(ctx, addr, "/ui/api/overview", 20*time.Second) }()
	}
	eventually(t, 30*time.Second, "the slow readers holding the connections", func() bool { return socketsOf(t, p.Cmd.Process.Pid) >= readers })
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	answered := 0
	tick := time.NewTicker(250 * time.Millisecond) // the probes' pace, not a synchronisation
	defer tick.Stop()
	for i := 0; i < probes; i++ {
		<-tick.C
		resp, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Logf("probe %d: %v", i, err)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			answered++
		} else {
			t.Logf("probe %d: %d", i, resp.StatusCode)
		}
	}
	t.Logf("%d of %d /healthz probes answered beside %d slow readers; relay sockets %d", answered, probes, readers, socketsOf(t, p.Cmd.Process.Pid))
	if answered < probes-1 {
		t.Errorf("%d of %d /healthz probes answered under the slow readers, want at least %d", answered, probes, probes-1)
	}
}
