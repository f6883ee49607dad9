// SPDX-License-Identifier: Apache-2.0

package config

import (
	"net"
	"regexp"
	"strconv"
	"strings"
)

// Kubernetes gives every container the "service links" of each Service of its namespace
// (unless the pod sets enableServiceLinks: false): for a Service outbox-relay, variables
// OUTBOX_RELAY_SERVICE_HOST, OUTBOX_RELAY_PORT_9464_TCP_ADDR and so on, which share our
// prefix. They are recognised by name and value together, exactly as the kubelet writes them,
// so that a person's typo of a similar shape (OUTBOX_REDIS_PORT=6379) is still refused.
var (
	// {SVC}_SERVICE_HOST: the ClusterIP.
	linkServiceHost = regexp.MustCompile(`^OUTBOX(?:_[A-Z0-9_]+)?_SERVICE_HOST$`)
	// {SVC}_SERVICE_PORT (first port) and {SVC}_SERVICE_PORT_{NAME} (each named port): a number.
	linkServicePort = regexp.MustCompile(`^OUTBOX(?:_[A-Z0-9_]+)?_SERVICE_PORT(?:_[A-Z0-9_]+)?$`)
	// {SVC}_PORT: proto://ClusterIP:port of the first port.
	linkPort = regexp.MustCompile(`^OUTBOX(?:_[A-Z0-9_]+)?_PORT$`)
	// {SVC}_PORT_{port}_{PROTO}[_PROTO|_PORT|_ADDR]: the Docker-link variables of each port.
	linkPortProto = regexp.MustCompile(`^OUTBOX(?:_[A-Z0-9_]+)?_PORT_([0-9]+)_(TCP|UDP|SCTP)(?:_(PROTO|PORT|ADDR))?$`)
)

// serviceLink reports whether the environment variable name=value is one the kubelet sets
// for a Service whose name starts with "outbox" (see enableServiceLinks in the Kubernetes
// API): the configuration ignores those.
func serviceLink(name, value string) bool {
	if linkServiceHost.MatchString(name) && isIP(value) {
		return true
	}
	if linkServicePort.MatchString(name) && isPort(value) {
		return true
	}
	if linkPort.MatchString(name) {
		if _, _, ok := linkURL(value); ok {
			return true
		}
	}
	m := linkPortProto.FindStringSubmatch(name)
	if m == nil {
		return false
	}
	port, proto := m[1], strings.ToLower(m[2])
	switch m[3] {
	case "":
		p, pr, ok := linkURL(value)
		return ok && p == port && pr == proto
	case "PROTO":
		return value == proto
	case "PORT":
		return value == port && isPort(value)
	default: // ADDR
		return isIP(value)
	}
}

// linkURL splits the kubelet's proto://ClusterIP:port (the IP in brackets when IPv6).
func linkURL(v string) (port, proto string, ok bool) {
	proto, hostPort, found := strings.Cut(v, "://")
	if !found || (proto != "tcp" && proto != "udp" && proto != "sctp") {
		return "", "", false
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || !isIP(host) || !isPort(port) {
		return "", "", false
	}
	return port, proto, true
}

func isIP(s string) bool { return net.ParseIP(s) != nil }

// isPort accepts a port number written as the kubelet writes it (no sign, no leading zero).
func isPort(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 1 && n <= 65535 && strconv.Itoa(n) == s
}
