// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary stand in for a running relay: it sleeps with the command
// line it was given, for healthcheck --pid to read.
const helperEnv = "HEALTHCHECK_TEST_STAND_IN"

// binaryEnv makes the test binary run as outbox-relay itself (main's execute), for tests that
// need the process's own environment, exit code and streams.
const binaryEnv = "RELAY_TEST_AS_BINARY"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	if os.Getenv(binaryEnv) == "1" {
		os.Exit(execute(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// The image's HEALTHCHECK (healthcheck --pid=1) checks the relay where its --config file says
// it listens, not at the default address.
func TestHealthcheckHonoursTheRelaysConfigFile(t *testing.T) {
	t.Parallel()
	srv := healthz(t)
	file := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(file, []byte("http:\n  addr: "+strings.TrimPrefix(srv.URL, "http://")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	relay := exec.Command(os.Args[0], "run", "--config", file)
	relay.Env = append(os.Environ(), helperEnv+"=1")
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay.Process.Kill(); _ = relay.Wait() }()
	pid := "--pid=" + itoa(relay.Process.Pid)

	if r := cli(t, "", false, "healthcheck", pid); r.code != 0 || r.out != "ok\n" {
		t.Fatalf("healthcheck --pid of a relay run with --config: %+v", r)
	}
	// Without --pid the default address is checked, where nothing listens.
	if r := cli(t, "", false, "healthcheck", "--http-addr=127.0.0.1:1"); r.code != exitRuntime {
		t.Fatalf("healthcheck of the default address: %+v", r)
	}

	// --http-addr on the relay's command line beats its file, as in the relay.
	relay2 := exec.Command(os.Args[0], "--config="+file, "--http-addr=127.0.0.1:1")
	relay2.Env = relay.Env
	if err := relay2.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = relay2.Process.Kill(); _ = relay2.Wait() }()
	if r := cli(t, "", false, "healthcheck", "--pid="+itoa(relay2.Process.Pid)); r.code != exitRuntime || !strings.Contains(r.errOut, "127.0.0.1:1") {
		t.Fatalf("healthcheck --pid of a relay run with --http-addr: %+v", r)
	}
	if r := cli(t, "", false, "healthcheck", "--pid=999999999"); r.code != exitRuntime || !strings.Contains(r.errOut, "process 999999999") {
		t.Fatalf("healthcheck of a missing process: %+v", r)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
