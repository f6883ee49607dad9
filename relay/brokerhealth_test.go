// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/internal/recorder"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// TestBrokerStatesFollowTheBroker: the publisher's broker states, as the dashboard shows them,
// follow a real outage of the protocol broker and an ACL refusal: healthy after a send,
// failing with an open circuit while the broker is down, healthy again when it is back,
// refusing (naming the access key, never the secret) when it refuses the credentials; the
// name server stays healthy throughout, and refusing once it is gone.
func TestBrokerStatesFollowTheBroker(t *testing.T) {
	t.Parallel()
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	const secret = "s3cret-never-shown"
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()},
		SendTimeout: 2 * time.Second, AccessKey: "relay-ak", SecretKey: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	ctx := context.Background()
	send := func(topic string) error {
		return pub.Send(ctx, relay.Route{}, &relay.Message{Topic: topic, Body: []byte("x"), Keys: []string{"SN-1"}})
	}
	state := func() rocketmq.BrokerState {
		t.Helper()
		bs := pub.BrokerStates()
		if len(bs) != 1 {
			t.Fatalf("broker states: %+v", bs)
		}
		return bs[0]
	}
	if err := send("orders"); err != nil {
		t.Fatal(err)
	}
	if s := state(); s.State != rocketmq.StateHealthy || s.Circuit != "closed" || s.Addr != broker.BrokerAddr() || s.Name != "broker-a" {
		t.Fatalf("after a send: %+v", s)
	}
	if ns := pub.NameServerStates(ctx); len(ns) != 1 || ns[0].State != rocketmq.StateHealthy {
		t.Fatalf("name server: %+v", ns)
	}

	broker.StopBroker()
	testenv.Eventually(t, 20*time.Second, "the broker failing with its circuit open", func() bool {
		_ = send("orders")
		s := state()
		return s.State == rocketmq.StateFailing && s.Circuit == "open" && s.LastError != ""
	})
	if err := broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "the broker healthy again", func() bool {
		return send("orders") == nil && state().State == rocketmq.StateHealthy && state().Circuit == "closed"
	})

	broker.SetTopicFaults("payments", rmqtest.Faults{ErrorRate: 1, ErrorCode: 16, ErrorRemark: "No permission for topic payments"})
	if err := send("payments"); relay.KindOf(err) != relay.SendMisconfigured {
		t.Fatalf("an ACL refusal: %v (%v)", err, relay.KindOf(err))
	}
	s := state()
	if s.State != rocketmq.StateRefusing || !strings.Contains(s.LastError, "relay-ak") || strings.Contains(s.LastError, secret) {
		t.Fatalf("after an ACL refusal: %+v", s)
	}

	broker.Close()
	if ns := pub.NameServerStates(ctx); ns[0].State != rocketmq.StateRefusing || ns[0].Since.IsZero() {
		t.Fatalf("name server gone: %+v", ns)
	}
}

// TestMetricsActivityCountsPerMinute: the dashboard's chart counts what the Prometheus
// counters count, in the minute it happened, and forgets what is older than an hour.
func TestMetricsActivityCountsPerMinute(t *testing.T) {
	t.Parallel()
	m := relay.NewMetrics(nil)
	clock := time.Unix(1_800_000_000, 0) // a minute's start
	relay.SetMetricsClock(m, func() time.Time { return clock })
	tm := recorder.For(m, "db", "local_message")
	tm.Published("orders", "", 5)
	tm.Failed("orders", "", 2)
	clock = clock.Add(90 * time.Second)
	tm.Dead("orders", "", 1)
	tm.Published("orders", "", 1)
	got := m.Activity("db", "local_message")
	if len(got) != relay.ActivityMinutes {
		t.Fatalf("%d minutes", len(got))
	}
	last, prev := got[len(got)-1], got[len(got)-2]
	if prev.Start != 1_800_000_000 || prev.Sent != 5 || prev.Failed != 2 || last.Sent != 1 || last.Dead != 1 {
		t.Fatalf("minutes: %+v, %+v", prev, last)
	}
	clock = clock.Add(59 * time.Minute) // the first minute is out of the hour now
	got = m.Activity("db", "local_message")
	var sent int64
	for _, g := range got {
		sent += g.Sent
	}
	if sent != 1 || m.Activity("db", "other") != nil {
		t.Fatalf("an hour later: %d sent in the window (want 1)", sent)
	}
}
