// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// forgeHalf sends, as any producer on the broker can, a half that names the check group and
// carries props; a body of 4 KiB or more is compressed by the client.
func (w *world) forgeHalf(body []byte, props map[string]string) {
	w.t.Helper()
	m := primitive.NewMessage(topic, body)
	m.WithProperty(primitive.PropertyTransactionPrepared, "true")
	m.WithProperty(primitive.PropertyProducerGroup, checkGroup)
	for k, v := range props {
		m.WithProperty(k, v)
	}
	res, err := w.sender.SendSync(w.ctx, m)
	if err != nil || res.Status != primitive.SendOK {
		w.t.Fatalf("forged half: %v %v", res, err)
	}
}

// dropped returns the checks the responder dropped unanswered for reason.
func (w *world) dropped(reason string) int {
	w.t.Helper()
	return w.counter("outbox_relay_transaction_checks_dropped_total", map[string]string{"reason": reason})
}

// Forged halves with compressed bodies that inflate to 4 MiB each: the responder answers
// their checks without ever inflating a body (the decision reads properties only), so the
// memory it allocates stays far below one inflated body per check.
func TestForgedCompressedChecksNotInflated(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	w.startResponder()
	const n, size = 16, 4 << 20
	bomb := make([]byte, size) // zeros: about 4 KiB compressed
	for i := 0; i < n; i++ {
		w.forgeHalf(bomb, map[string]string{outbox.MsgIDProperty: fmt.Sprintf("bomb-%d", i), outbox.WriterProperty: "c"})
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if sent := w.broker.TriggerCheck(); sent != n {
		t.Fatalf("%d checks sent, want %d", sent, n)
	}
	testenv.Eventually(t, 10*time.Second, "every forged check handled", func() bool {
		return w.handled() == n
	})
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > size {
		t.Fatalf("answering %d checks of compressed bodies allocated %d MiB: bodies were inflated", n, grown>>20)
	}
}

// A flood of checks while every worker is busy: the checks beyond the queue are dropped
// (the broker checks again at its next round) instead of each holding a goroutine.
func TestCheckFloodBoundedQueue(t *testing.T) {
	w := setup(t, rmqtest.Options{}, time.Hour)
	gate := make(chan struct{})
	defer close(gate)
	w.hold, w.workers, w.queueSize = gate, 1, 4
	w.startResponder()
	const n = 300
	for i := 0; i < n; i++ {
		w.forgeHalf([]byte("x"), map[string]string{outbox.MsgIDProperty: fmt.Sprintf("flood-%d", i), outbox.WriterProperty: "c"})
	}
	base := runtime.NumGoroutine()
	if sent := w.broker.TriggerCheck(); sent != n {
		t.Fatalf("%d checks sent, want %d", sent, n)
	}
	// One check is held by the worker and four wait in the queue; the rest are dropped, or,
	// without a bound, each waits in a goroutine of its own.
	testenv.Eventually(t, 10*time.Second, "the flood received", func() bool {
		return w.dropped("queue_full") >= n-5 || runtime.NumGoroutine()-base >= n/2
	})
	if g := runtime.NumGoroutine() - base; g > 20 {
		t.Fatalf("%d goroutines more during a flood of %d checks, want a bounded number", g, n)
	}
	if d := w.dropped("queue_full"); d != n-5 {
		t.Fatalf("%d checks dropped, want %d", d, n-5)
	}
}
