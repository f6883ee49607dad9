// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// BenchmarkCommitToConsume measures, on each broker, the time from a committed outbox row
// (inserted with the writer, which nudges the relay) to its arrival at a push consumer, one
// message at a time, with the relay binary running beside. Run it with -benchtime=200x.
func BenchmarkCommitToConsume(b *testing.B) {
	for _, name := range []string{"rmqtest", "rocketmq"} {
		b.Run(name, func(b *testing.B) {
			t := benchTargets[name](b)
			e := newEnv(b, t)
			topic := t.topic(b, "latency")
			in := t.consume(b, topic)
			e.startRelay(b, "OUTBOX_RELAY_POLL_INTERVAL=1s")
			// Warm up: producer started, consumer rebalanced.
			e.insert(b, outbox.Message{MsgID: "warm-up", Topic: topic, Body: []byte("warm-up")})
			in.wait(b, 1, 60*time.Second)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				id := fmt.Sprintf("lat-%06d", i)
				start := time.Now()
				e.insert(b, outbox.Message{MsgID: id, Topic: topic, Body: []byte(`{"orderSn":"SN1"}`)})
				for in.copies(id) == 0 {
					if time.Since(start) > 30*time.Second {
						b.Fatalf("%s not consumed within 30s", id)
					}
					time.Sleep(200 * time.Microsecond)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
			b.ReportMetric(q(0.5), "p50-ms")
			b.ReportMetric(q(0.95), "p95-ms")
			b.ReportMetric(q(0.99), "p99-ms")
			b.ReportMetric(q(1), "max-ms")
			if b.N == 1 {
				return // the framework's first probe run
			}
			fmt.Fprintf(os.Stderr, "%s: commit to consume over %d messages: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms\n",
				name, len(lat), q(0.5), q(0.95), q(0.99), q(1))
		})
	}
}

// benchTargets are the brokers the latency benchmarks run on, by name: the in-process test
// broker without faults, and Apache RocketMQ.
var benchTargets = map[string]func(testing.TB) *target{
	"rmqtest": func(tb testing.TB) *target {
		srv, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(srv.Close)
		return &target{name: "rmqtest", nameServer: srv.NameServerAddr(), brokerAddr: srv.BrokerAddr()}
	},
	"rocketmq": func(tb testing.TB) *target {
		return &target{name: "rocketmq", nameServer: testenv.RocketMQ(tb), brokerAddr: testenv.RocketMQBroker(), real: true}
	},
}
