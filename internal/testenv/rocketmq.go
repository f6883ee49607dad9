// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// RocketMQ returns the name server address (host:port) of the real Apache RocketMQ that
// scripts/rocketmq.sh (`make rocketmq`) starts, read from OUTBOX_TEST_ROCKETMQ_NAMESRV. When
// it is unset or nothing answers there, the test fails under CI=true and is skipped otherwise.
func RocketMQ(tb testing.TB) string {
	tb.Helper()
	addr := os.Getenv("OUTBOX_TEST_ROCKETMQ_NAMESRV")
	what := "Apache RocketMQ name server"
	if addr == "" {
		unavailableRocketMQ(tb, what, errors.New("OUTBOX_TEST_ROCKETMQ_NAMESRV is not set"))
	}
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		unavailableRocketMQ(tb, what+" at "+addr, err)
	}
	c.Close()
	return addr
}

func unavailableRocketMQ(tb testing.TB, what string, err error) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("%s unavailable: %v (run `make rocketmq` to start it)", what, err)
	}
	tb.Skipf("%s unavailable: %v (run `make rocketmq` to start it)", what, err)
}

// RocketMQBroker returns the address of that RocketMQ's broker (where tests create their
// topics), from OUTBOX_TEST_ROCKETMQ_BROKER; it defaults to scripts/rocketmq.sh's
// 127.0.0.1:19911.
func RocketMQBroker() string {
	if v := os.Getenv("OUTBOX_TEST_ROCKETMQ_BROKER"); v != "" {
		return v
	}
	return "127.0.0.1:19911"
}
