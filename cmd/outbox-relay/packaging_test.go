// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// docker-compose.yml configures the relay with OUTBOX_* variables only: each must be a real
// configuration variable, and together they must make a valid configuration.
func TestComposeEnvironmentIsValidConfig(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	known := map[string]bool{"OUTBOX_CONFIG": true}
	for _, k := range config.Keys() {
		known[config.EnvName(k)] = true
	}
	for _, name := range []string{"mysql", "redis", "rocketmq-namesrv", "rocketmq-broker", "migrate", "relay", "orders"} {
		if _, ok := doc.Services[name]; !ok {
			t.Errorf("docker-compose.yml has no service %s", name)
		}
	}
	for svc, s := range doc.Services {
		for k := range s.Environment {
			if strings.HasPrefix(k, "OUTBOX_") && !known[k] {
				t.Errorf("service %s sets %s, which is no configuration variable", svc, k)
			}
		}
	}
	relay := doc.Services["relay"].Environment
	if len(relay) == 0 {
		t.Fatal("relay service has no environment")
	}
	for k, v := range relay {
		t.Setenv(k, v)
	}
	r := cli(t, "", false, "config")
	if r.code != 0 {
		t.Fatalf("the relay service's environment is not a valid configuration: %s", r.errOut)
	}
	if !strings.Contains(r.out, "- rocketmq-namesrv:9876") || !strings.Contains(r.out, "purge_retention: 168h") {
		t.Fatalf("environment not applied:\n%s", r.out)
	}
}

// The Dockerfile builds with the script that `make check-build` runs without Docker, and
// checks health with the binary itself (the final image has no shell).
func TestDockerfileSharesTheBuildScript(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	d := string(b)
	for _, want := range []string{"scripts/build-release.sh", `CMD ["/usr/local/bin/outbox-relay", "healthcheck", "--pid=1"]`, "USER nonroot", "FROM golang:1.26 AS build"} {
		if !strings.Contains(d, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// The relay image bakes in no configuration through ENV: the environment beats the config
// file, so a baked-in OUTBOX_ variable would override what the operator mounted.
func TestImageDoesNotOverrideAMountedConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stage := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.EqualFold(f[0], "FROM") && strings.EqualFold(f[2], "AS") {
			stage = f[3]
		}
		if stage == "relay" && len(f) > 0 && (strings.EqualFold(f[0], "ENV") || strings.Contains(line, "OUTBOX_")) && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			t.Errorf("relay image sets configuration: %q", line)
		}
	}
	if stage != "relay" {
		t.Fatal("no relay stage found in the Dockerfile")
	}
}
