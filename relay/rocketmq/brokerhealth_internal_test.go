// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// TestBrokerHealthStates: a broker is slow after a send that took SlowSend or went
// unanswered, and stays slow for a minute after the unanswered one; failing on an answer with
// an error or when unreachable; refusing on a configuration refusal; each state keeps the
// time it began. A name server refusing connections is refusing, a slow connect slow.
func TestBrokerHealthStates(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	h := &brokerHealth{now: func() time.Time { return now }}
	const addr = "10.0.0.1:10911"
	state := func() BrokerState { return *h.brokers[addr] }
	step := func(d time.Duration) { now = now.Add(d) }

	h.acked("broker-a", addr, 5*time.Millisecond)
	if s := state(); s.State != StateHealthy || !s.Since.Equal(now) {
		t.Fatalf("after an ack: %+v", s)
	}
	step(time.Second)
	h.acked("broker-a", addr, 2*SlowSend)
	if s := state(); s.State != StateSlow {
		t.Fatalf("after a slow ack: %+v", s)
	}
	step(time.Second)
	h.acked("broker-a", addr, time.Millisecond)
	step(time.Second)
	h.failed(addr, &message.SendError{Kind: message.SendTransient, Code: -1, Err: errors.New("request timeout")})
	slowSince := now
	if s := state(); s.State != StateSlow || !s.Since.Equal(slowSince) || s.LastError != "request timeout" {
		t.Fatalf("after a timeout: %+v", s)
	}
	step(10 * time.Second)
	h.acked("broker-a", addr, time.Millisecond)
	if s := state(); s.State != StateSlow || !s.Since.Equal(slowSince) {
		t.Fatalf("an ack 10 s after a timeout: %+v", s)
	}
	step(slowFor)
	h.acked("broker-a", addr, time.Millisecond)
	if s := state(); s.State != StateHealthy {
		t.Fatalf("an ack a minute after a timeout: %+v", s)
	}
	h.failed(addr, &message.SendError{Kind: message.SendTransient, Code: 2, Err: errors.New("SYSTEM_BUSY")})
	if s := state(); s.State != StateFailing {
		t.Fatalf("after a busy answer: %+v", s)
	}
	h.failed(addr, &message.SendError{Kind: message.SendMisconfigured, Code: 16, Err: errors.New("no permission (access key ak)")})
	if s := state(); s.State != StateRefusing {
		t.Fatalf("after an ACL refusal: %+v", s)
	}

	got := h.probed([]string{"a:9876", "b:9876", "c:9876"}, func(i int) (time.Duration, error) {
		return []time.Duration{time.Millisecond, SlowDial, time.Millisecond}[i], []error{nil, nil, syscall.ECONNREFUSED}[i]
	})
	if got[0].State != StateHealthy || got[1].State != StateSlow || got[2].State != StateRefusing {
		t.Fatalf("name servers: %+v", got)
	}
}
