// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// The body of the dead row the security tests try to read.
const secretBody = `{"email":"alice@example.com","card":"4111 1111 1111 1111"}`

// insertDead writes a dead row holding secretBody and returns its id.
func (e *env) insertDead(t *testing.T) int64 {
	t.Helper()
	res, err := e.db.Exec("INSERT INTO local_message (msg_id, topic, content, status, fail_reason) VALUES (?, 'payments', ?, 3, 'test')",
		"dead-"+strconv.FormatInt(time.Now().UnixNano(), 36), secretBody)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.LastInsertId()
	return id
}

// get sends GET path to p with the Host header host (empty: the address) and the bearer
// token (empty: none), and returns the status and body.
func get(t *testing.T, p *proc, path, host, token string) (int, string) {
	t.Helper()
	return testenv.GetAs(t, "http://"+p.httpAddr()+path, host, token)
}

func listening(t *testing.T, p *proc) {
	t.Helper()
	eventually(t, 30*time.Second, "the relay's HTTP server", func() bool { _, code := httpGet(p, "/healthz"); return code == 200 })
}

// TestReadingBodiesIsAPermission: the binary on a loopback http.addr serves message bodies
// without a token but never to a foreign Host (DNS rebinding), while /metrics and probes
// answer under any name for Prometheus and the kubelet. That bodies need the read or the
// admin token off loopback is cmd/outbox-relay TestBodiesNeedATokenOffLoopback, on the
// dashboard the relay builds from each http.addr: the rule judges the configured address,
// and no test server listens off loopback (docs/decisions.md, "Test servers on loopback only").
func TestReadingBodiesIsAPermission(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.insertDead(t)
	local := e.startRelay(t) // 127.0.0.1:0
	listening(t, local)
	msg := "/ui/api/message?table=local_message&id=" + strconv.FormatInt(id, 10)
	cases := []struct {
		name        string
		path, host  string
		code        int
		bodyVisible bool
	}{
		{"loopback listener: no token needed", msg, "", 200, true},
		{"loopback listener, foreign host (DNS rebinding)", msg, "attacker.example", 421, false},
		{"loopback listener, rebinding to the page", "/ui/", "attacker.example", 421, false},
	}
	for _, c := range cases {
		code, body := get(t, local, c.path, c.host, "")
		shown := strings.Contains(body, "4111 1111") || strings.Contains(body, `"msg_id":"dead-`)
		if code != c.code || shown != c.bodyVisible {
			t.Errorf("%s: %d, message shown %v; want %d, shown %v (%.200s)", c.name, code, shown, c.code, c.bodyVisible, body)
		}
	}
	// Prometheus and probes answer under any name and without a token.
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _ := get(t, local, path, "outbox-relay.shop.svc:9464", ""); code != 200 {
			t.Errorf("%s under a service name: %d, want 200", path, code)
		}
	}
}

// TestOverviewNotFrozenByAClientThatDoesNotRead is issue 23, row 6: a client pipelines
// overview requests and never reads the answers; other viewers still get the overview.
func TestOverviewNotFrozenByAClientThatDoesNotRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Twelve tables: an overview larger than the server's write buffers, so that writing it
	// to a client that does not read blocks.
	tables := []string{"local_message"}
	for i := 1; i < 12; i++ {
		tables = append(tables, fmt.Sprintf("outbox_%02d", i))
		if err := schema.Migrate(context.Background(), e.db.DB, tables[i]); err != nil {
			t.Fatal(err)
		}
	}
	p := e.startRelay(t, "OUTBOX_MYSQL_TABLES="+strings.Join(tables, ","))
	listening(t, p)
	// The overview grows as each table's relay reports in (leader, counts): wait until it is
	// large enough for the attack to mean something.
	testenv.Eventually(t, 30*time.Second, "an overview of the twelve tables over 8 KiB", func() bool {
		code, body := get(t, p, "/ui/api/overview", "", "")
		return code == 200 && len(body) >= 8<<10
	})
	// A small receive buffer, set before connecting, so the server's writes block soon.
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.Dial("tcp", p.httpAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() {
		w := bufio.NewWriter(conn)
		for i := 0; i < 20000; i++ {
			if _, err := fmt.Fprintf(w, "GET /ui/api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
				return
			}
		}
		_ = w.Flush()
	}()
	// Wait until the answers pile up unread on the slow client's side.
	raw, _ := conn.(*net.TCPConn).SyscallConn()
	eventually(t, 30*time.Second, "answers queued on the slow connection", func() bool {
		var n int
		_ = raw.Control(func(fd uintptr) { n = unread(fd) })
		return n >= 2048
	})
	c := http.Client{Timeout: 5 * time.Second}
	for i := 0; i < 10; i++ {
		resp, err := c.Get("http://" + p.httpAddr() + "/ui/api/overview")
		if err != nil {
			t.Fatalf("overview %d while a client does not read: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("overview %d: %d", i, resp.StatusCode)
		}
	}
}

// unread returns the bytes waiting in a socket's receive queue (FIONREAD).
func unread(fd uintptr) int {
	var n int32
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n)))
	if errno != 0 {
		return 0
	}
	return int(n)
}

// TestHTTPServerBoundsIdleAndSlowClients is issue 23, row 3, as a small load test on
// loopback: thousands of idle keep-alive connections, clients stalled in their headers and
// in their bodies. The relay's open sockets stay bounded by http.max_connections, /healthz
// keeps answering, the relay keeps publishing, and its memory stays bounded.
func TestHTTPServerBoundsIdleAndSlowClients(t *testing.T) {
	e := newEnv(t)
	const idle, slowHeaders, slowBodies = 3000, 1500, 300
	const maxConns = 1024
	raiseFDLimit(t, idle+slowHeaders+slowBodies+256)
	p := e.startRelay(t)
	listening(t, p)
	addr := p.httpAddr()
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	hold := func(c net.Conn) { mu.Lock(); conns = append(conns, c); mu.Unlock() }
	var wg sync.WaitGroup
	dial := func(n int, first string, readAnswer bool) {
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 8 {
					c, err := net.Dial("tcp", addr)
					if err != nil {
						continue // the listen backlog is full: the client gives up, as a real one would
					}
					hold(c)
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := io.WriteString(c, first); err != nil {
						continue
					}
					if readAnswer { // an idle keep-alive connection after one answered request
						resp, err := http.ReadResponse(bufio.NewReader(c), nil)
						if err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
				}
			}()
		}
	}
	dial(idle, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", true)
	dial(slowHeaders, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ", false)
	dial(slowBodies, "POST /ui/api/requeue HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{", false)
	wg.Wait()

	// While they are held: the relay publishes, /healthz answers, sockets and memory bounded.
	e.insertN(t, "load", 200)
	c := http.Client{Timeout: 2 * time.Second}
	for i := 0; i < 20; i++ {
		resp, err := c.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("/healthz %d under load: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("/healthz %d under load: %d", i, resp.StatusCode)
		}
	}
	eventually(t, 30*time.Second, "the rows published under load", func() bool { return e.count(t, "status = 2") == 200 })
	pid := p.Cmd.Process.Pid
	sockets, rss := socketsOf(t, pid), rssKB(t, pid)
	t.Logf("held %d client connections; relay: %d sockets open, RSS %d MB", len(conns), sockets, rss>>10)
	if sockets > maxConns+64 {
		t.Errorf("the relay holds %d sockets, over http.max_connections (%d) and its own few", sockets, maxConns)
	}
	if rss > 200<<10 {
		t.Errorf("the relay's RSS is %d MB under load, want at most 200 MB", rss>>10)
	}
}

// raiseFDLimit raises this test process's open-file limit to n when it is lower (the relay
// process inherits it); the limit is the process's own, restored at cleanup.
func raiseFDLimit(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Fatalf("the open-file limit's hard maximum is %d, the test needs %d", lim.Max, n)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// socketsOf counts the sockets process pid has open.
func socketsOf(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// rssKB is process pid's resident memory in KiB.
func rssKB(t *testing.T, pid int) int { return procStatusKB(t, pid, "VmRSS") }

// procStatusKB is the figure field (VmRSS, VmHWM, ...) of process pid's status, in KiB.
func procStatusKB(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.Fields(rest)[0])
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
