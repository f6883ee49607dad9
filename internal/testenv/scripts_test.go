// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"net"
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

// TestConcurrentBrokerStartsStartOneBroker: go test runs packages at once, and two of them
// may ask scripts/rocketmq.sh for the same broker at the same moment. Both must get the one
// broker, started once; before the script took a lock, the second saw the first's broker
// still booting, killed it and started another while tests of the first used it. The
// broker is a stand-in (a fake java on PATH that boots slowly, then listens on the port).
func TestConcurrentBrokerStartsStartOneBroker(t *testing.T) {
	t.Parallel()
	services, bin := t.TempDir(), t.TempDir()
	dir := checkout(t, "a")
	src := "build/rocketmq/loopback/LoopbackHAService.java"
	code, err := os.ReadFile(filepath.Join("..", "..", src))
	if err != nil {
		t.Fatal(err)
	}
	version := "5.3.3"
	rmq := filepath.Join(services, "rocketmq")
	for path, body := range map[string]string{
		filepath.Join(dir, src):                                           string(code),
		filepath.Join(rmq, "lib-"+version, ".complete"):                   "",
		filepath.Join(rmq, "loopback-"+version, ".complete"):              "",
		filepath.Join(rmq, "loopback-"+version, "LoopbackHAService.java"): string(code),
		filepath.Join(bin, "java"): `#!/bin/bash
conf=${*: -1}
port=$(sed -n 's/^listenPort=//p' "$conf")
echo "$$" >>"$FAKE_JAVA_STARTS"
sleep 3
echo "The broker[fake] boot success."
exec python3 -c "import socket, time
s = socket.socket(); s.bind(('127.0.0.1', $port)); s.listen(); time.sleep(120)"
`,
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	namesrv := exec.Command("sleep", "300")
	if err := namesrv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = namesrv.Process.Kill(); _ = namesrv.Wait() })
	if err := os.MkdirAll(filepath.Join(rmq, "namesrv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rmq, "namesrv", "pid"), []byte(strconv.Itoa(namesrv.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(freeLoopbackPort(t))
	starts := filepath.Join(services, "starts")
	run := func() (string, error) {
		cmd := exec.Command("bash", filepath.Join(dir, "scripts/rocketmq.sh"), "broker-start", "broker-twice", port)
		cmd.Env = append(os.Environ(), "OUTBOX_SERVICES_DIR="+services, "PATH="+bin+":"+os.Getenv("PATH"), "FAKE_JAVA_STARTS="+starts)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(rmq, "broker-twice", "pid")); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	outs := make(chan string, 2)
	for range 2 {
		go func() {
			out, err := run()
			if err != nil {
				out = "failed: " + err.Error() + "\n" + out
			}
			outs <- out
		}()
	}
	a, b := <-outs, <-outs
	lastLine := func(s string) string {
		lines := strings.Split(strings.TrimSpace(s), "\n")
		return lines[len(lines)-1]
	}
	if lastLine(a) != lastLine(b) || strings.HasPrefix(a, "failed") || strings.HasPrefix(b, "failed") {
		t.Fatalf("the two starts disagree on the broker:\n%s\n---\n%s", a, b)
	}
	got, _ := os.ReadFile(starts)
	if n := len(strings.Fields(string(got))); n != 1 {
		t.Fatalf("the broker was started %d times (pids %q):\n%s\n---\n%s", n, got, a, b)
	}
}

// freeLoopbackPort returns a loopback port free now, whose neighbours (a broker also takes
// port-2 and port+1) are free too.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		free := true
		for _, p := range []int{port - 2, port + 1} {
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p))); err != nil {
				free = false
			} else {
				l.Close()
			}
		}
		if free {
			return port
		}
	}
	t.Fatal("no free loopback port with free neighbours")
	return 0
}
