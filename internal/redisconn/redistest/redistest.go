// SPDX-License-Identifier: Apache-2.0

// Package redistest starts Redis processes of a test's own for the Sentinel, Redlock and
// Cluster tests: redis-server and redis-sentinel (Debian's packages; scripts/services.sh
// installs them) on free loopback ports, with their files in the test's temporary
// directory. Every process is killed when the test ends; no other server is touched. A
// missing binary skips the test, or fails it under CI=true (testenv.Unavailable).
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// Proc is one redis-server or redis-sentinel process started by the test.
type Proc struct {
	// Addr is the process's 127.0.0.1:port.
	Addr string
	// Dir holds its configuration, data and log.
	Dir string
	bin string
	cmd *exec.Cmd
	tb  testing.TB
}

// Need skips the test (fails it under CI=true) when one of the binaries is missing.
func Need(tb testing.TB, bins ...string) {
	tb.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			testenv.Unavailable(tb, b, fmt.Errorf("%w (scripts/services.sh installs it from Debian's packages)", err))
		}
	}
}

// Server starts a redis-server with the extra configuration lines given (e.g.
// "replicaof 127.0.0.1 7000", "cluster-enabled yes") and waits until it answers PING.
func Server(tb testing.TB, lines ...string) *Proc {
	tb.Helper()
	Need(tb, "redis-server")
	return start(tb, "redis-server", lines)
}

// Sentinel starts a redis-sentinel monitoring master (host:port) as name with quorum, which
// considers the master down after downAfter without an answer.
func Sentinel(tb testing.TB, name, master string, quorum int, downAfter time.Duration) *Proc {
	tb.Helper()
	Need(tb, "redis-sentinel")
	host, port, _ := net.SplitHostPort(master)
	return start(tb, "redis-sentinel", []string{
		fmt.Sprintf("sentinel monitor %s %s %s %d", name, host, port, quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, downAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, (10 * downAfter).Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
	})
}

func start(tb testing.TB, bin string, lines []string) *Proc {
	tb.Helper()
	dir, err := os.MkdirTemp(tb.TempDir(), bin+"-")
	if err != nil {
		tb.Fatal(err)
	}
	var p *Proc
	for attempt := 0; attempt < 5; attempt++ {
		port := freePort(tb)
		conf := append([]string{
			"bind 127.0.0.1", "port " + strconv.Itoa(port), "dir " + dir,
			"save \"\"", "appendonly no", "logfile " + filepath.Join(dir, "log"),
			"daemonize no",
		}, lines...)
		file := filepath.Join(dir, "redis.conf") // the Sentinel rewrites it: it must be ours
		if err := os.WriteFile(file, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			tb.Fatal(err)
		}
		p = &Proc{Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, bin: bin, tb: tb}
		if p.run() {
			return p
		}
		// The port was taken between freePort and the bind: try another.
	}
	tb.Fatalf("%s did not answer PING; log:\n%s", bin, p.Log())
	return nil
}

// run starts the process on its configuration file and reports whether it answers PING.
func (p *Proc) run() bool {
	p.tb.Helper()
	cmd := exec.Command(p.bin, filepath.Join(p.Dir, "redis.conf"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		p.tb.Fatalf("start %s: %v", p.bin, err)
	}
	p.cmd = cmd
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return p.waitPing(exited)
}

// Restart starts the process again, on the same port and configuration, after Kill. A
// redis-server comes back empty (nothing is saved).
func (p *Proc) Restart() {
	p.tb.Helper()
	if !p.run() {
		p.tb.Fatalf("%s did not come back on %s; log:\n%s", p.bin, p.Addr, p.Log())
	}
}

// waitPing reports whether the process answered PING before it exited or 10 s passed.
func (p *Proc) waitPing(exited <-chan struct{}) bool {
	c := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// Kill kills the process with SIGKILL, as a crash would, and waits for it to be gone.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	testenv.Eventually(p.tb, 5*time.Second, p.Addr+" to stop answering", func() bool {
		conn, err := net.DialTimeout("tcp", p.Addr, 100*time.Millisecond)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
}

// Client returns a client of the process, closed when the test ends.
func (p *Proc) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: p.Addr})
	p.tb.Cleanup(func() { c.Close() })
	return c
}

// Log returns the process's log file.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(filepath.Join(p.Dir, "log"))
	return string(b)
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// QuietClient drops go-redis's own log lines (a dial refused by a killed master, the
// Sentinels' new master) for the rest of the test binary: the tests assert what the relay
// does, not what the client logs.
func QuietClient() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
