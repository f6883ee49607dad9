// SPDX-License-Identifier: Apache-2.0

package tlsbridge_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// BenchmarkSendTLS measures the relay's publisher sending to the test broker in plain TCP,
// with the client's own unverified TLS, and with verified TLS through the bridge, in the
// same run: batches of 32 messages and single messages of 1 KiB, 8 sends in flight.
func BenchmarkSendTLS(b *testing.B) {
	ca := testcerts.NewCA(b, "bench")
	serverTLS := &tls.Config{Certificates: []tls.Certificate{ca.Issue(b, serverName)}}
	for _, batch := range []int{32, 1} {
		for _, mode := range []string{"plain", "client-insecure-tls", "bridge-verified-tls"} {
			b.Run(fmt.Sprintf("batch=%d/%s", batch, mode), func(b *testing.B) {
				opts := rmqtest.Options{Logf: func(string, ...any) {}}
				if mode != "plain" {
					opts.TLS = serverTLS
				}
				srv, err := rmqtest.Start(opts)
				if err != nil {
					b.Fatal(err)
				}
				defer srv.Close()
				ns := []string{srv.NameServerAddr()}
				if mode == "bridge-verified-tls" {
					ns = bridge(b, &tls.Config{RootCAs: ca.Pool(), ServerName: serverName}, srv).NameServers()
				}
				benchSends(b, ns, mode == "client-insecure-tls", batch)
			})
		}
	}
}

// benchSends sends b.N requests of batch messages through a publisher of ns, 8 at a time,
// and reports messages per second.
func benchSends(b *testing.B, ns []string, clientTLS bool, batch int) {
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: ns, TLS: clientTLS, SendTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	body := make([]byte, 1024)
	msgs := func(seq int64) []*relay.Message {
		out := make([]*relay.Message, batch)
		for i := range out {
			out[i] = &relay.Message{MsgID: strconv.FormatInt(seq, 10) + "-" + strconv.Itoa(i), Topic: "BenchTls", Body: body}
		}
		return out
	}
	ctx := context.Background()
	if err := pub.Send(ctx, relay.Route{}, msgs(-1)...); err != nil { // the route, the connections
		b.Fatal(err)
	}
	var seq atomic.Int64
	b.SetParallelism(4) // 8 in flight on 2 cores
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := pub.Send(ctx, relay.Route{}, msgs(seq.Add(1))...); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "msgs/s")
}
