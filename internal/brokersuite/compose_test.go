// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestComposeMatchesScript: docker-compose.yml runs the RocketMQ version that
// build/rocketmq/pom.xml pins for scripts/rocketmq.sh, and every broker setting it writes has
// the script's value, so the suite tests what compose users run.
func TestComposeMatchesScript(t *testing.T) {
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	compose, script, pom := read("docker-compose.yml"), read("scripts/rocketmq.sh"), read("build/rocketmq/pom.xml")
	version := regexp.MustCompile(`<rocketmq.version>([^<]+)<`).FindStringSubmatch(pom)
	if version == nil {
		t.Fatal("build/rocketmq/pom.xml has no <rocketmq.version>")
	}
	images := regexp.MustCompile(`image: apache/rocketmq:(\S+)`).FindAllStringSubmatch(compose, -1)
	if len(images) == 0 {
		t.Fatal("docker-compose.yml runs no apache/rocketmq image")
	}
	for _, m := range images {
		if m[1] != version[1] {
			t.Errorf("docker-compose.yml runs apache/rocketmq:%s, the script %s", m[1], version[1])
		}
	}
	// The broker.conf heredocs: key=value lines of identifiers.
	setting := regexp.MustCompile(`(?m)^\s+([a-zA-Z0-9]+)=(\S*)$`)
	scriptConf := map[string]string{}
	for _, m := range setting.FindAllStringSubmatch(script, -1) {
		scriptConf[m[1]] = m[2]
	}
	n := 0
	for _, m := range setting.FindAllStringSubmatch(compose, -1) {
		n++
		v, ok := scriptConf[m[1]]
		if strings.HasPrefix(v, "$") {
			continue // set per broker by the script (brokerName, ports, paths)
		}
		if !ok || v != m[2] {
			t.Errorf("docker-compose.yml sets %s=%s, scripts/rocketmq.sh %q", m[1], m[2], v)
		}
	}
	if n < 5 || !strings.Contains(compose, "autoCreateTopicEnable=false") {
		t.Errorf("docker-compose.yml's broker.conf not found (%d settings)", n)
	}
}
