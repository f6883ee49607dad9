// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
)

// serviceLinkEnv is what the kubelet puts in the environment of every container of a
// namespace where a Service named name exists with ClusterIP ip and these ports (the first
// named, as most charts do): {SVC}_SERVICE_HOST/_PORT, a _SERVICE_PORT_{NAME} per named port,
// and the Docker-link variables {SVC}_PORT and {SVC}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR].
func serviceLinkEnv(name, ip string, ports ...servicePort) []string {
	svc := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	host := ip
	if strings.Contains(ip, ":") {
		host = "[" + ip + "]"
	}
	env := []string{
		svc + "_SERVICE_HOST=" + ip,
		sprintf("%s_SERVICE_PORT=%d", svc, ports[0].port),
	}
	for i, p := range ports {
		if p.name != "" {
			env = append(env, sprintf("%s_SERVICE_PORT_%s=%d", svc, strings.ToUpper(strings.ReplaceAll(p.name, "-", "_")), p.port))
		}
		url := sprintf("%s://%s:%d", strings.ToLower(p.proto), host, p.port)
		if i == 0 {
			env = append(env, svc+"_PORT="+url)
		}
		pre := sprintf("%s_PORT_%d_%s", svc, p.port, p.proto)
		env = append(env, pre+"="+url, pre+"_PROTO="+strings.ToLower(p.proto),
			sprintf("%s_PORT=%d", pre, p.port), pre+"_ADDR="+ip)
	}
	return env
}

type servicePort struct {
	name  string
	port  int
	proto string
}

// A Service named outbox-relay (or outbox-relay-metrics, or plain outbox) in the pod's
// namespace must not stop the relay: the kubelet's service-link variables share our prefix.
func TestServiceLinkVariablesAreIgnored(t *testing.T) {
	t.Parallel()
	var env []string
	env = append(env, serviceLinkEnv("outbox-relay", "10.96.12.34", servicePort{"http", 9464, "TCP"})...)
	env = append(env, serviceLinkEnv("outbox-relay-metrics", "10.96.0.7",
		servicePort{"metrics", 9464, "TCP"}, servicePort{"admin-ui", 8080, "TCP"}, servicePort{"", 5353, "UDP"})...)
	env = append(env, serviceLinkEnv("outbox", "fd00:10:96::2a", servicePort{"", 80, "SCTP"})...)
	if len(env) < 30 {
		t.Fatalf("the test set is too small: %v", env)
	}
	if probs := envProblems(env, nil); len(probs) != 0 {
		t.Fatalf("service-link variables reported: %v", probs)
	}

	// A real typo beside them is still refused, naming the variable; so are variables shaped
	// like a link but holding what a person would write, not what the kubelet writes.
	bad := []string{
		"OUTBOX_RELAY_POLL_INTERVALL=1s",
		"OUTBOX_REDIS_PORT=6379",                // no such key; a link's _PORT is a URL
		"OUTBOX_RELAY_SERVICE_HOST=relay.local", // a ClusterIP is an address
		"OUTBOX_RELAY_SERVICE_PORT=http",        // a port is a number
		"OUTBOX_RELAY_PORT_9464_TCP_PORT=9465",  // the number is in the name
		"OUTBOX_RELAY_PORT_9464_TCP_PROTO=udp",  // and so is the protocol
		"OUTBOX_RELAY_PORT_9464_TCP=tcp://10.0.0.1:80",
		"OUTBOX_RELAY_PORT_9464_HTTP_ADDR=10.0.0.1", // protocols are TCP, UDP, SCTP
		"OUTBOX_MYSQL_DSN_SERVICE_PORT=",
	}
	probs := envProblems(append(env, bad...), nil)
	if len(probs) != len(bad) {
		t.Errorf("want %d problems, got %d: %v", len(bad), len(probs), probs)
	}
	for i, p := range probs {
		if i < len(bad) && p.key != strings.SplitN(bad[i], "=", 2)[0] {
			t.Errorf("problem %d names %s, want %s", i, p.key, bad[i])
		}
	}
}

// No configuration key may ever be set by a variable of a service-link shape: a Service of the
// right name would then configure the relay.
func TestNoKeyHasAServiceLinkName(t *testing.T) {
	t.Parallel()
	for _, k := range Keys() {
		name := EnvName(k)
		for _, v := range []string{"10.0.0.1", "80", "tcp://10.0.0.1:80", "tcp", "udp"} {
			if serviceLink(name, v) {
				t.Errorf("%s (key %s) = %s is taken for a service link", name, k, v)
			}
		}
	}
}
