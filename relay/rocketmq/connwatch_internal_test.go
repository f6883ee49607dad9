// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/relay/metrics"
)

// withAndWithoutCredentials runs fn without ACL credentials and with them: the client's
// Start registers its ACL signer only with them, so the watcher is tested both ways.
func withAndWithoutCredentials(t *testing.T, fn func(t *testing.T, accessKey, secretKey string)) {
	t.Run("no credentials", func(t *testing.T) { fn(t, "", "") })
	t.Run("credentials", func(t *testing.T) { fn(t, "relay-ak", "relay-sk") })
}

// TestConnWatchHooksTheClient: the dropped-connection watcher reaches into the pinned
// rocketmq-client-go (its producer's client, remoting client, connection table and
// interceptor). An upgrade that moves them, or a Start that replaces the watcher's
// interceptor, turns the watcher off: this test fails instead, with and without credentials.
func TestConnWatchHooksTheClient(t *testing.T) {
	withAndWithoutCredentials(t, func(t *testing.T, ak, sk string) {
		p, err := NewPublisher(Config{NameServers: []string{"127.0.0.1:1"}, Connections: 1, AccessKey: ak, SecretKey: sk})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		c, err := p.producer("")
		if err != nil {
			t.Fatal(err)
		}
		if !c.watched {
			t.Fatal("the producer's sends are not watched for dropped connections: rocketmq-client-go's layout changed (see connwatch.go)")
		}
	})
}

// TestConnWatchWithACLCredentials: on a broker that checks every request's signature, a
// publisher with credentials gets its sends signed (none refused) and a send whose connection
// the broker drops is given up as dropped (errConnectionDropped), not after its send timeout;
// the log line and the metric say the watcher is on. Without the signer (a wrong secret)
// the broker refuses: the check is real.
func TestConnWatchWithACLCredentials(t *testing.T) {
	withAndWithoutCredentials(t, func(t *testing.T, ak, sk string) {
		opts := rmqtest.Options{Logf: func(string, ...any) {}}
		if ak != "" {
			opts.Credentials = map[string]string{ak: sk}
		}
		broker, err := rmqtest.Start(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer broker.Close()
		var logs testenv.SyncBuffer
		reg := prometheus.NewRegistry()
		p, err := NewPublisher(Config{NameServers: []string{broker.NameServerAddr()}, Connections: 1,
			SendTimeout: 5 * time.Second, AccessKey: ak, SecretKey: sk, Log: zerolog.New(&logs), Metrics: metrics.NewMetrics(reg)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		ctx := context.Background()
		msg := func(topic string) *message.Message {
			return &message.Message{MsgID: "m-" + topic, Topic: topic, Body: []byte("x")}
		}
		if err := p.Send(ctx, message.Route{}, msg("signed")); err != nil {
			t.Fatalf("send: %v (ACL refusals: %d)", err, broker.ACLRefusals())
		}
		broker.SetTopicFaults("dropped", rmqtest.Faults{DropBeforeStore: 1})
		err = p.Send(ctx, message.Route{}, msg("dropped"))
		if !errors.Is(err, errConnectionDropped) {
			t.Fatalf("a send whose connection the broker closed failed with %v, want it given up as dropped (the watcher is off)", err)
		}
		if n := broker.ACLRefusals(); n != 0 {
			t.Fatalf("%d requests refused for their signature", n)
		}
		if !strings.Contains(logs.String(), "dropped connections detected") {
			t.Fatalf("no log line saying the watcher is on:\n%s", logs.String())
		}
		if v := gaugeValue(t, reg, "outbox_relay_rocketmq_connection_watch"); v != 1 {
			t.Fatalf("outbox_relay_rocketmq_connection_watch = %v, want 1", v)
		}
		if ak == "" {
			return
		}
		wrong, err := NewPublisher(Config{NameServers: []string{broker.NameServerAddr()}, Connections: 1,
			SendTimeout: 5 * time.Second, AccessKey: ak, SecretKey: "not-" + sk})
		if err != nil {
			t.Fatal(err)
		}
		defer wrong.Close()
		if err := wrong.Send(ctx, message.Route{}, msg("signed")); err == nil || broker.ACLRefusals() == 0 {
			t.Fatalf("a send signed with the wrong secret: %v, %d refusals; want it refused", err, broker.ACLRefusals())
		}
	})
}

// gaugeValue returns the value of the one series of gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single series of %s among %d families", name, len(mfs))
	return 0
}

// TestConnWatchStopsWithThePublisher: the watcher runs from the publisher's first producer,
// waiting between sends, and Close stops it: no goroutine of it is left once Close returns.
func TestConnWatchStopsWithThePublisher(t *testing.T) {
	// Not parallel: the goroutines counted are every test's.
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	const watcher = "relay/rocketmq.(*connWatch)"
	before := testenv.Goroutines(watcher)
	p, err := NewPublisher(Config{NameServers: []string{broker.NameServerAddr()}, Connections: 1, SendTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.Send(context.Background(), message.Route{}, &message.Message{MsgID: "m-1", Topic: "watched", Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if n := len(testenv.Goroutines(watcher)) - len(before); n != 1 {
		t.Fatalf("%d watchers run after the first send, want 1", n)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.NoGoroutinesLeft(t, before, watcher)
}
