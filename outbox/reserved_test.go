// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// brokerCommonJar finds the rocketmq-common jar that `make rocketmq` fetched from Maven Central.
func brokerCommonJar() (string, error) {
	home, _ := os.UserHomeDir()
	patterns := []string{
		filepath.Join(home, ".m2/repository/org/apache/rocketmq/rocketmq-common/5.3.3/rocketmq-common-5.3.3.jar"),
		"/tmp/outbox-relay-services*/rocketmq/lib-5.3.3/rocketmq-common-5.3.3.jar",
	}
	for _, p := range patterns {
		if m, _ := filepath.Glob(p); len(m) > 0 {
			return m[0], nil
		}
	}
	return "", errors.New("rocketmq-common-5.3.3.jar not found (make rocketmq fetches it)")
}

// The broker's own property names, read from its MessageConst class, are exactly the relay's
// brokerProperties, and every one of them is refused as a user property.
func TestReservedPropertiesMatchTheBroker(t *testing.T) {
	t.Parallel()
	jar, err := brokerCommonJar()
	if err != nil {
		testenv.Unavailable(t, "Apache RocketMQ's rocketmq-common jar", err)
	}
	if _, err := exec.LookPath("javap"); err != nil {
		testenv.Unavailable(t, "javap (a JDK)", err)
	}
	out, err := exec.Command("javap", "-cp", jar, "-constants", "org.apache.rocketmq.common.message.MessageConst").CombinedOutput()
	if err != nil {
		t.Fatalf("javap: %v\n%s", err, out)
	}
	var broker []string
	for _, m := range regexp.MustCompile(`String (?:PROPERTY_\w+|DUP_INFO) = "([^"]+)";`).FindAllStringSubmatch(string(out), -1) {
		broker = append(broker, m[1])
	}
	if len(broker) < 60 {
		t.Fatalf("read only %d property names from the broker's MessageConst:\n%s", len(broker), out)
	}
	slices.Sort(broker)
	ours := slices.Sorted(slices.Values(brokerProperties))
	if !slices.Equal(broker, ours) {
		t.Errorf("the broker defines %v\nbrokerProperties lists %v", broker, ours)
	}
	for _, n := range broker {
		if err := ValidateProperties(map[string]string{n: "x"}); err == nil {
			t.Errorf("property %q, which the broker acts on, is accepted", n)
		}
	}
}

// The timer family and the transient prefix are refused whatever name follows, and ordinary
// names, including ones that merely contain a reserved word, are accepted.
func TestReservedPropertyFamilies(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ANYTHING_NEW", "__RMQ.TRANSIENT.X", "INNER_MULTI_DISPATCH", "DELAY", "__transactionId__"} {
		if err := ValidateProperties(map[string]string{n: "1"}); err == nil || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("%s: got %v, want a reserved-name error", n, err)
		}
	}
	for _, n := range []string{"order_id", "timer", "MY_TIMER_DELAY_SEC", "tenant", "traceparent"} {
		if err := ValidateProperties(map[string]string{n: "1"}); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
