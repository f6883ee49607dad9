// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// The benchmarks measure the real client against this broker over loopback, so relay
// throughput can be read against the ceiling of the path it publishes through.
// Bodies are 200 bytes, like a typical outbox row.

var benchBody = bytes.Repeat([]byte("x"), 200)

func benchMessage() *primitive.Message {
	m := primitive.NewMessage("Bench", benchBody)
	m.WithTag("created")
	m.WithKeys([]string{"order-1"})
	return m
}

func reportRate(b *testing.B, msgs int, start time.Time) {
	b.ReportMetric(float64(msgs)/time.Since(start).Seconds(), "msgs/s")
}

func BenchmarkSendSync(b *testing.B) {
	s := startServer(b, Options{})
	p := newProducer(b, s)
	if _, err := p.send(5*time.Second, benchMessage()); err != nil { // route and connection warm-up
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if _, err := p.send(5*time.Second, benchMessage()); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, start)
}

func BenchmarkSendSyncParallel16(b *testing.B) {
	s := startServer(b, Options{})
	p := newProducer(b, s)
	if _, err := p.send(5*time.Second, benchMessage()); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := p.send(5*time.Second, benchMessage()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	reportRate(b, b.N, start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// BenchmarkSendBatch50 sends 50 messages per request, the way past the client's
// per-request cost; b.N counts messages.
func BenchmarkSendBatch50(b *testing.B) {
	s := startServer(b, Options{})
	p := newProducer(b, s)
	batch := make([]*primitive.Message, 50)
	b.ResetTimer()
	start := time.Now()
	for sent := 0; sent < b.N; sent += len(batch) {
		for i := range batch {
			batch[i] = benchMessage()
		}
		if _, err := p.send(5*time.Second, batch...); err != nil {
			b.Fatal(err)
		}
	}
	reportRate(b, b.N, start)
}
