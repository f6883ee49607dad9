// SPDX-License-Identifier: Apache-2.0

package charttest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	corev1 "k8s.io/api/core/v1"
)

// servers returns the test servers of bin/services.env (make test-chart sets them); without
// them the test is skipped, except with CI=true, where it fails.
func servers(t *testing.T) (dsn, redisAddr, nameSrv string) {
	t.Helper()
	dsn, redisAddr, nameSrv = os.Getenv("OUTBOX_TEST_MYSQL_DSN"), os.Getenv("OUTBOX_TEST_REDIS_ADDR"), os.Getenv("OUTBOX_TEST_ROCKETMQ_NAMESRV")
	if dsn == "" || redisAddr == "" || nameSrv == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("OUTBOX_TEST_MYSQL_DSN, OUTBOX_TEST_REDIS_ADDR and OUTBOX_TEST_ROCKETMQ_NAMESRV are required with CI=true (make test-chart)")
		}
		t.Skip("no test servers: run make test-chart")
	}
	return dsn, redisAddr, nameSrv
}

// scratchDatabase creates a database of its own on the test server and returns its DSN.
func scratchDatabase(t *testing.T, server string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "charttest_" + hex.EncodeToString(b)
	cfg.DBName = ""
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name)
		admin.Close()
	})
	cfg.DBName = name
	return cfg.FormatDSN()
}

// freePort is a free TCP port on this host.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// pod is one relay process started from a rendered container.
type pod struct {
	relay corev1.Container
	cmd   *exec.Cmd
	out   *strings.Builder
	done  chan error
	grace time.Duration
}

// The probes and the scrape path of the rendered relay group answer on a running relay, on
// the port the manifests name: two pods of the group, one leading and one standby, both
// ready (a standby is ready: /readyz speaks of the relay's own connections, not of the lock);
// each stops on SIGTERM, exit 0, well within the pod's grace period.
func TestProbesAgainstTheRelay(t *testing.T) {
	server, redisAddr, nameSrv := servers(t)
	dsn := scratchDatabase(t, server)
	c := loadChart(t)
	var pods []*pod
	for i := 0; i < 2; i++ {
		// http.addr on 127.0.0.1: in a pod the relay listens on every interface for the
		// kubelet, but a test server listens on loopback only (scripts/listeners.sh); the
		// chart takes only the port from the address.
		r := render(t, c, "shop-relay", "", map[string]any{
			"mode": "standalone",
			"config": map[string]any{
				"redis":    map[string]any{"addr": redisAddr},
				"rocketmq": map[string]any{"nameservers": []any{nameSrv}},
				"http":     map[string]any{"addr": fmt.Sprintf("127.0.0.1:%d", freePort(t))},
			},
		})
		relay, _ := relayContainer(t, r.deployment)
		env := binaryEnv(t, r, relay)
		// The Secret holds mysql-dsn only: the optional keys are absent, so the kubelet sets
		// no variable for them.
		var podEnv []string
		for _, kv := range env {
			name, _, _ := strings.Cut(kv, "=")
			switch {
			case name == "OUTBOX_MYSQL_DSN":
				podEnv = append(podEnv, name+"="+dsn)
			case name == "OUTBOX_CONFIG" || name == "PATH" || !isSecretEnv(relay, name):
				podEnv = append(podEnv, kv)
			}
		}
		if i == 0 {
			migrate := exec.Command(relayBin, "migrate")
			migrate.Env = podEnv
			if out, err := migrate.CombinedOutput(); err != nil {
				t.Fatalf("migrate: %v\n%s", err, out)
			}
		}
		p := &pod{relay: relay, out: &strings.Builder{}, done: make(chan error, 1),
			grace: time.Duration(*r.deployment.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second}
		p.cmd = exec.Command(relayBin, relay.Args...)
		p.cmd.Env = podEnv
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { p.done <- p.cmd.Wait() }()
		t.Cleanup(func() {
			_ = p.cmd.Process.Kill()
			if t.Failed() {
				t.Logf("relay %d output:\n%s", i, p.out.String())
			}
		})
		pods = append(pods, p)
		// As the kubelet does: the startup probe within its budget, then the others.
		probe(t, p, p.relay.StartupProbe, "startup")
		probe(t, p, p.relay.LivenessProbe, "liveness")
		probe(t, p, p.relay.ReadinessProbe, "readiness")
	}
	var states []string
	for _, p := range pods {
		body, code := get(t, p, "/readyz")
		if code != http.StatusOK {
			t.Errorf("/readyz %d:\n%s", code, body)
		}
		states = append(states, body)
		if body, code := get(t, p, "/metrics"); code != http.StatusOK || !strings.Contains(body, "outbox_relay_build_info") {
			t.Errorf("/metrics (the monitors' path) %d", code)
		}
	}
	joined := strings.Join(states, "\n")
	if strings.Count(joined, "local_message: leader") != 1 || !strings.Contains(joined, "standby") && !strings.Contains(joined, "held by another") {
		t.Errorf("want one leader and one ready standby:\n%s", joined)
	}
	for i, p := range pods {
		start := time.Now()
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if err != nil {
				t.Errorf("relay %d after SIGTERM: %v", i, err)
			}
			t.Logf("relay %d: SIGTERM → exit %s (grace %s)", i, time.Since(start).Round(time.Millisecond), p.grace)
		case <-time.After(p.grace):
			t.Errorf("relay %d still running %s (terminationGracePeriodSeconds) after SIGTERM", i, p.grace)
		}
	}
}

func isSecretEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}
	}
	return false
}

// probe runs an HTTP probe of the container as the kubelet would: GET on the named port,
// success on 200-399, within periodSeconds × failureThreshold.
func probe(t *testing.T, p *pod, pr *corev1.Probe, kind string) {
	t.Helper()
	if pr == nil || pr.HTTPGet == nil {
		t.Fatalf("no %s probe", kind)
	}
	period, failures := max(pr.PeriodSeconds, 1), max(pr.FailureThreshold, 1)
	budget := time.Duration(period*failures) * time.Second
	deadline := time.Now().Add(budget)
	for {
		body, code := getPort(p, pr.HTTPGet.Port.String(), pr.HTTPGet.Path)
		if code >= 200 && code < 400 {
			return
		}
		select {
		case err := <-p.done:
			t.Fatalf("%s probe: the relay exited: %v", kind, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s probe GET %s: %d after %s:\n%s", kind, pr.HTTPGet.Path, code, budget, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func get(t *testing.T, p *pod, path string) (string, int) {
	t.Helper()
	return getPort(p, "relay-http", path)
}

// getPort GETs path on the container's named port at 127.0.0.1 (0: no answer).
func getPort(p *pod, portName, path string) (string, int) {
	port := int32(0)
	for _, cp := range p.relay.Ports {
		if cp.Name == portName {
			port = cp.ContainerPort
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error(), 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}
