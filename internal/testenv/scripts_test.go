// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// checkout copies what scripts/rocketmq.sh needs into a directory of its own: a checkout as
// far as the script can tell (it identifies its checkout by its own path).
func checkout(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for _, f := range []string{"scripts/rocketmq.sh", "scripts/users.sh", "build/rocketmq/pom.xml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestStopLeavesServersAnotherCheckoutUses: two checkouts share one set of servers; the
// first one's `scripts/rocketmq.sh stop` leaves them running (the other still uses them)
// and says so; the last one's stops them. The servers are stand-in processes recorded where
// the script keeps its name server's and broker's pids; no real server is touched.
func TestStopLeavesServersAnotherCheckoutUses(t *testing.T) {
	t.Parallel()
	services := t.TempDir()
	a, b := checkout(t, "a"), checkout(t, "b")
	var servers []*exec.Cmd
	for _, name := range []string{"namesrv", "broker-a"} {
		cmd := exec.Command("sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		go func() { _ = cmd.Wait() }() // reap it once stopped, so that kill -0 sees it gone
		servers = append(servers, cmd)
		dir := filepath.Join(services, "rocketmq", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := func(dir string, args ...string) string {
		cmd := exec.Command("bash", append([]string{filepath.Join(dir, "scripts/rocketmq.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "OUTBOX_SERVICES_DIR="+services)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rocketmq.sh %v in %s: %v\n%s", args, dir, err, out)
		}
		return string(out)
	}
	running := func() bool {
		for _, s := range servers {
			if s.Process.Signal(syscall.Signal(0)) != nil {
				return false
			}
		}
		return true
	}
	// Both checkouts register as `start` does (start itself would need Java).
	for _, dir := range []string{a, b} {
		real, _ := filepath.EvalSymlinks(dir)
		reg := exec.Command("bash", "-c", `cd "$1" && USERS_DIR="$2/users" && log() { :; } && . scripts/users.sh && users_register`, "-", real, services)
		if out, err := reg.CombinedOutput(); err != nil {
			t.Fatalf("register %s: %v\n%s", dir, err, out)
		}
	}
	if out := script(a, "stop"); !strings.Contains(out, "other checkouts use them") || !running() {
		t.Fatalf("checkout a's stop while b uses the servers: running %v, output:\n%s", running(), out)
	}
	script(b, "stop")
	Eventually(t, 30*time.Second, "the last checkout's stop stops the servers", func() bool { return !running() })
}
