// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The variables the kubelet gives every container of a namespace holding a Service
// outbox-relay (ClusterIP 10.96.12.34, port 9464 named http) and a Service
// outbox-relay-metrics (10.96.0.7, ports metrics 9464/TCP and dns 5353/UDP), exactly as
// Kubernetes writes them (pkg/kubelet/envvars).
var kubeServiceLinks = []string{
	"OUTBOX_RELAY_SERVICE_HOST=10.96.12.34",
	"OUTBOX_RELAY_SERVICE_PORT=9464",
	"OUTBOX_RELAY_SERVICE_PORT_HTTP=9464",
	"OUTBOX_RELAY_PORT=tcp://10.96.12.34:9464",
	"OUTBOX_RELAY_PORT_9464_TCP=tcp://10.96.12.34:9464",
	"OUTBOX_RELAY_PORT_9464_TCP_PROTO=tcp",
	"OUTBOX_RELAY_PORT_9464_TCP_PORT=9464",
	"OUTBOX_RELAY_PORT_9464_TCP_ADDR=10.96.12.34",
	"OUTBOX_RELAY_METRICS_SERVICE_HOST=10.96.0.7",
	"OUTBOX_RELAY_METRICS_SERVICE_PORT=9464",
	"OUTBOX_RELAY_METRICS_SERVICE_PORT_METRICS=9464",
	"OUTBOX_RELAY_METRICS_SERVICE_PORT_DNS=5353",
	"OUTBOX_RELAY_METRICS_PORT=tcp://10.96.0.7:9464",
	"OUTBOX_RELAY_METRICS_PORT_9464_TCP=tcp://10.96.0.7:9464",
	"OUTBOX_RELAY_METRICS_PORT_9464_TCP_PROTO=tcp",
	"OUTBOX_RELAY_METRICS_PORT_9464_TCP_PORT=9464",
	"OUTBOX_RELAY_METRICS_PORT_9464_TCP_ADDR=10.96.0.7",
	"OUTBOX_RELAY_METRICS_PORT_5353_UDP=udp://10.96.0.7:5353",
	"OUTBOX_RELAY_METRICS_PORT_5353_UDP_PROTO=udp",
	"OUTBOX_RELAY_METRICS_PORT_5353_UDP_PORT=5353",
	"OUTBOX_RELAY_METRICS_PORT_5353_UDP_ADDR=10.96.0.7",
}

// runBinary runs the outbox-relay command line (this test binary standing in for it) with
// exactly env as its environment.
func runBinary(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append([]string{binaryEnv + "=1"}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return result{cmd.ProcessState.ExitCode(), out.String(), errOut.String()}
}

// A Service named outbox-relay in the pod's namespace put the relay in a crash loop: each of
// its service-link variables was "unknown" (exit 2). They are ignored now, while a typo of a
// real variable beside them is still refused by name.
func TestKubernetesServiceLinksDoNotStopTheRelay(t *testing.T) {
	t.Parallel()
	env := append([]string{
		"OUTBOX_MYSQL_DSN=app:s3cret@tcp(127.0.0.1:1)/shop",
		"OUTBOX_RELAY_POLL_INTERVAL=250ms",
		"OUTBOX_LOG_FORMAT=json",
	}, kubeServiceLinks...)

	r := runBinary(t, env, "config")
	if r.code != exitOK || !strings.Contains(r.out, "poll_interval: 250ms") {
		t.Fatalf("config with the service links: %+v", r)
	}
	// run gets past the configuration and fails only at the (unreachable) database: exit 1.
	r = runBinary(t, env, "run")
	if r.code != exitRuntime || !strings.Contains(r.errOut, "connect to MySQL") {
		t.Fatalf("run with the service links: want exit 1 at the database, got %+v", r)
	}

	typo := append([]string{"OUTBOX_RELAY_POLL_INTERVALL=5s"}, env...)
	for _, args := range [][]string{{"config"}, {"run"}} {
		r = runBinary(t, typo, args...)
		if r.code != exitUsage || !strings.Contains(r.errOut, "OUTBOX_RELAY_POLL_INTERVALL: unknown environment variable") {
			t.Fatalf("%s with a misspelt variable: want exit 2 naming it, got %+v", args[0], r)
		}
		if n := strings.Count(r.errOut, "unknown environment variable"); n != 1 {
			t.Errorf("%s: %d unknown variables reported, want only the typo:\n%s", args[0], n, r.errOut)
		}
	}
}
