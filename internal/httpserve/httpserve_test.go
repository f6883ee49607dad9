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

func get(addr string) (int, error) {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

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

// When every connection runs a handler, a new connection is refused rather than one of them
// cut.
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
	if _, err := get(s.Addr().String()); err == nil {
		t.Fatal("a third connection was served while two handlers ran at the limit of 2")
	}
	close(release)
	for i := 0; i < 2; i++ {
		if code := <-results; code != 200 {
			t.Fatalf("a running request was cut: %d", code)
		}
	}
}
