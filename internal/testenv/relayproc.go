// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BuildRelay builds the outbox-relay binary into a new temporary directory, for tests that run
// it as a process; TestMain calls it once and calls cleanup after the tests.
func BuildRelay() (path string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "outbox-relay-bin")
	if err != nil {
		return "", nil, fmt.Errorf("build outbox-relay: %w", err)
	}
	path = filepath.Join(dir, "outbox-relay")
	build := exec.Command("go", "build", "-o", path, "github.com/outbox-relay/outbox-relay/cmd/outbox-relay")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build outbox-relay: %w", err)
	}
	return path, func() { os.RemoveAll(dir) }, nil
}

// Proc is a process started by StartProc; Out collects its stdout and stderr.
type Proc struct {
	Cmd  *exec.Cmd
	Out  *SyncBuffer
	done chan error
}

// StartProc starts bin with args and the environment env; at cleanup it kills the process and,
// if the test failed, logs the last 8 KiB of its output.
func StartProc(tb testing.TB, env []string, bin string, args ...string) *Proc {
	tb.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	p := &Proc{Cmd: cmd, Out: &SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.Out, p.Out
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { p.done <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if tb.Failed() {
			out := p.Out.String()
			if len(out) > 8<<10 {
				out = out[len(out)-8<<10:]
			}
			tb.Logf("%s pid %d output (last 8 KiB):\n%s", filepath.Base(bin), cmd.Process.Pid, out)
		}
	})
	return p
}

// Wait waits up to d for the process to exit and returns how it exited; ok is false when it
// is still running.
func (p *Proc) Wait(d time.Duration) (err error, ok bool) {
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup and later calls
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// Kill9 kills the process with SIGKILL and waits until it is gone.
func (p *Proc) Kill9(tb testing.TB) {
	tb.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		tb.Fatal(err)
	}
	<-p.done
	p.done <- nil // for the cleanup
}

// LoggedHTTPAddr is the address a relay's JSON log says its HTTP server listens on ("" until
// it has logged it).
func LoggedHTTPAddr(log string) string {
	var addr string
	for _, line := range strings.Split(log, "\n") {
		var entry struct{ Addr, Message string }
		if json.Unmarshal([]byte(line), &entry) == nil && strings.HasPrefix(entry.Message, "http:") {
			addr = entry.Addr
		}
	}
	return addr
}

// Metrics returns the /metrics page served at addr ("" when addr is empty or does not answer).
func Metrics(addr string) string {
	if addr == "" {
		return ""
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// OwnedPartitions returns the partitions a /metrics page shows at 1 in
// outbox_relay_partition_owned: those the relay holds.
func OwnedPartitions(page string) []int {
	var out []int
	for _, line := range strings.Split(page, "\n") {
		if !strings.HasPrefix(line, "outbox_relay_partition_owned{") || !strings.HasSuffix(line, " 1") {
			continue
		}
		_, rest, _ := strings.Cut(line, `partition="`)
		v, _, _ := strings.Cut(rest, `"`)
		if n, err := strconv.Atoi(v); err == nil {
			out = append(out, n)
		}
	}
	return out
}
