// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestSkipsAreListedWithTheirReasons: a run whose real-broker test skipped prints "ok" for
// its package and then names the skipped test and why; passing tests' output stays quiet,
// failing tests' output is shown.
func TestSkipsAreListedWithTheirReasons(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"p/brokersuite","Test":"TestRealBroker"}`,
		`{"Action":"output","Package":"p/brokersuite","Test":"TestRealBroker","Output":"=== RUN   TestRealBroker\n"}`,
		`{"Action":"output","Package":"p/brokersuite","Test":"TestRealBroker","Output":"    suite.go:40: Apache RocketMQ unavailable: set OUTBOX_TEST_ROCKETMQ_NAMESRV\n"}`,
		`{"Action":"output","Package":"p/brokersuite","Test":"TestRealBroker","Output":"--- SKIP: TestRealBroker (0.00s)\n"}`,
		`{"Action":"skip","Package":"p/brokersuite","Test":"TestRealBroker"}`,
		`{"Action":"output","Package":"p/brokersuite","Test":"TestQuiet","Output":"    quiet.go:1: chatter\n"}`,
		`{"Action":"pass","Package":"p/brokersuite","Test":"TestQuiet"}`,
		`{"Action":"output","Package":"p/relay","Test":"TestBroken","Output":"    relay_test.go:9: 3 rows lost\n"}`,
		`{"Action":"fail","Package":"p/relay","Test":"TestBroken"}`,
		`{"Action":"output","Package":"p/brokersuite","Output":"ok  \tp/brokersuite\t0.1s\n"}`,
		`# p/other: build failed`,
	}, "\n")
	var out bytes.Buffer
	skips, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	report(&out, skips)
	got := out.String()
	for _, want := range []string{
		"ok  \tp/brokersuite\t0.1s\n",
		"relay_test.go:9: 3 rows lost",
		"# p/other: build failed",
		"1 TEST(S) SKIPPED",
		"SKIP p/brokersuite.TestRealBroker: suite.go:40: Apache RocketMQ unavailable: set OUTBOX_TEST_ROCKETMQ_NAMESRV",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "chatter") {
		t.Errorf("a passing test's output was shown:\n%s", got)
	}
}
