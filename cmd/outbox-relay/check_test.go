// SPDX-License-Identifier: Apache-2.0

package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// check lists the routes' topics against a real RocketMQ: an existing one as ok, a missing
// one with the mqadmin command that creates it (FIFO for an ordered route), and exits 1.
func TestCheckListsMissingTopics(t *testing.T) {
	ns := testenv.RocketMQ(t)
	missing := "missing_" + testenv.RandomSuffix(8)
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", ns)
	// "orders" is created by scripts/rocketmq.sh start; a pattern cannot be checked.
	t.Setenv("OUTBOX_ROUTES", `[{"topic":"orders"},{"topic":"`+missing+`","ordered":true},{"topic":"pay-*"}]`)
	// check reads no database, but the configuration requires one.
	r := cli(t, "", false, "check", "--mysql-dsn=u:p@tcp(127.0.0.1:1)/x", "--topic", "orders")
	if r.code != exitRuntime {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, exitRuntime, r.out, r.errOut)
	}
	if !regexp.MustCompile(`(?m)^orders\s+ok\s+\d+ writable queues`).MatchString(r.out) {
		t.Errorf("orders is not listed as ok:\n%s", r.out)
	}
	if !regexp.MustCompile(`(?m)^` + missing + `\s+missing`).MatchString(r.out) {
		t.Errorf("%s is not listed as missing:\n%s", missing, r.out)
	}
	want := "mqadmin updateTopic -n " + ns + " -c DefaultCluster -t " + missing + " -r 8 -w 8 -a +message.type=FIFO"
	if !strings.Contains(r.out, want) {
		t.Errorf("no %q in:\n%s", want, r.out)
	}
	if strings.Contains(r.out, "pay-") || strings.Count(r.out, "\norders ") != 1 {
		t.Errorf("patterns are listed, or a topic twice:\n%s", r.out)
	}
}
