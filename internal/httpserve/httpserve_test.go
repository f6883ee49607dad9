// SPDX-License-Identifier: Apache-2.0

package httpserve

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serve starts a server of h with max connections on loopback, stopped at cleanup.
func serve(t *testing.T, max int, h http.Handler) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", h, Limits{MaxConnections: max})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func get(addr string) (int, error) { return getPath(addr, "/") }

// At the limit, connections stalled in their headers make room for a new request.
func TestStalledConnectionsMakeRoom(t *testing.T) {
	t.Parallel()
	s := serve(t, 2, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // never finished
	}
	for i := 0; i < 3; i++ {
		if code, err := get(s.Addr().String()); err != nil || code != 200 {
			t.Fatalf("request %d beside stalled connections: %d, %v", i, code, err)
		}
	}
	if n := s.Open(); n > 2 {
		t.Fatalf("%d connections open, over the limit of 2", n)
	}
}

// When every connection runs a handler, a new connection is not served (it gets a reserved
// connection, which serves probes only, and 503) rather than one of them cut.
func TestBusyConnectionsAreNotCut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	s := serve(t, 2, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "done")
	}))
	results := make(chan int, 2)
	for i := 0; i < 2; i++ {
		go func() { code, _ := get(s.Addr().String()); results <- code }()
	}
	<-started
	<-started
	if code, err := get(s.Addr().String()); err == nil && code != http.StatusServiceUnavailable {
		t.Fatalf("a third connection was served (%d) while two handlers ran at the limit of 2", code)
	}
	close(release)
	for i := 0; i < 2; i++ {
		if code := <-results; code != 200 {
			t.Fatalf("a running request was cut: %d", code)
		}
	}
}

// serveLimits starts a server of mux with lim on loopback, stopped at cleanup.
func serveLimits(t *testing.T, lim Limits, h http.Handler) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", h, lim)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve() }()
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// getPath GETs path from addr on a connection of its own and returns the status.
func getPath(addr, path string) (int, error) {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + path)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// TestProbesGetAReservedConnection: with every connection running a handler, /healthz is
// still answered (on a reserved connection), another path on one gets 503, and past the
// reserved connections a new one is refused.
func TestProbesGetAReservedConnection(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{}, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) { started <- struct{}{}; <-release })
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	s := serveLimits(t, Limits{MaxConnections: 2, Reserved: 1, ReservedPaths: []string{"/healthz"}}, mux)
	addr := s.Addr().String()
	for i := 0; i < 2; i++ {
		go func() { _, _ = getPath(addr, "/slow") }()
		<-started
	}
	for i := 0; i < 3; i++ {
		if code, err := getPath(addr, "/healthz"); err != nil || code != 200 {
			t.Fatalf("/healthz %d with every connection busy: %d, %v", i, code, err)
		}
	}
	if code, err := getPath(addr, "/slow"); err == nil && code != http.StatusServiceUnavailable {
		t.Fatalf("/slow on a reserved connection: %d, want 503", code)
	}
}

// TestSlowReaderIsCutAfterTheStall: a client that never reads its answer is cut after
// WriteStall, long before WriteTimeout, so it frees its connection.
func TestSlowReaderIsCutAfterTheStall(t *testing.T) {
	t.Parallel()
	werr := make(chan error, 1)
	big := make([]byte, 64<<20) // more than any socket buffer takes
	s := serveLimits(t, Limits{MaxConnections: 4, WriteStall: 200 * time.Millisecond, WriteTimeout: time.Hour},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, err := w.Write(big)
			werr <- err
		}))
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") // and never read
	select {
	case err := <-werr:
		if err == nil {
			t.Fatal("64 MiB written to a client that reads nothing")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the write to a client that reads nothing still blocks after 20 s (WriteStall 200 ms)")
	}
}
