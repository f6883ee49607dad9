// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
)

// The middleware's consumer span continues the trace of the message's traceparent, or
// starts one when there is none; the handler runs in it; it records the guard's outcome,
// and only a failure marks it as an error (a message held by another consumer is not).
// Without a TracerProvider the handler's context carries no span.
func TestConsumerSpanContinuesTheMessagesTrace(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	inHandler := map[string]trace.SpanContext{}
	boom := errors.New("warehouse unavailable")
	handler := func(ctx context.Context, msg *primitive.MessageExt) error {
		inHandler[msg.GetKeys()] = trace.SpanContextFromContext(ctx)
		if msg.GetKeys() == "SN-fail" {
			return boom
		}
		return applyOrder(ctx, b.DB, msg.GetKeys())
	}
	consume, err := wrap(t, g, rocketmqmw.Config{Logger: testLogger(t), TracerProvider: tp}, handler)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := b.Store.Claim(ctx, "stock:venue_topic::SN-busy", "elsewhere", time.Minute); r != idempotency.ClaimAcquired || err != nil {
		t.Fatal(r, err)
	}
	traced := newMsg("m1", "", "SN-ok")
	traced.WithProperty("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	traced.WithProperty("OUTBOX_MSG_ID", "outbox-1")
	if _, err := consume(ctx, traced, newMsg("m2", "", "SN-fail"), newMsg("m3", "", "SN-busy")); err == nil {
		t.Fatal("a failing handler gave no error")
	}

	got := map[string]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		if s.Name != "venue_topic process" || s.SpanKind != trace.SpanKindConsumer {
			t.Errorf("span %q of kind %s, want %q of kind consumer", s.Name, s.SpanKind, "venue_topic process")
		}
		got[attr(s, "messaging.rocketmq.message.keys")] = s
	}
	if len(got) != 3 {
		t.Fatalf("%d consumer spans, want 3 (one per message): %v", len(got), got)
	}
	ok, fail, busy := got[`["SN-ok"]`], got[`["SN-fail"]`], got[`["SN-busy"]`]
	if ok.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || ok.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("traced message: span in trace %s under %s, want the traceparent's", ok.SpanContext.TraceID(), ok.Parent.SpanID())
	}
	if fail.Parent.IsValid() || !fail.SpanContext.IsValid() {
		t.Errorf("message without traceparent: span parent %v, want the root of a new trace", fail.Parent)
	}
	for keys, s := range map[string]tracetest.SpanStub{"SN-ok": ok, "SN-fail": fail} {
		if inHandler[keys].SpanID() != s.SpanContext.SpanID() {
			t.Errorf("%s: handler ran in span %s, want the consumer span %s", keys, inHandler[keys].SpanID(), s.SpanContext.SpanID())
		}
	}
	for _, c := range []struct {
		span        tracetest.SpanStub
		id, outcome string
		status      codes.Code
	}{
		{ok, "outbox-1", "applied", codes.Unset},
		{fail, "m2", "failed", codes.Error},
		{busy, "m3", "in_progress", codes.Unset},
	} {
		if a := attr(c.span, "messaging.message.id"); a != c.id {
			t.Errorf("messaging.message.id %q, want %q", a, c.id)
		}
		if a := attr(c.span, "outbox.idempotency.outcome"); a != c.outcome {
			t.Errorf("%s: outcome %q, want %q", c.id, a, c.outcome)
		}
		if c.span.Status.Code != c.status {
			t.Errorf("%s: status %v, want %v", c.id, c.span.Status.Code, c.status)
		}
		for k, v := range map[string]string{"messaging.system": "rocketmq", "messaging.destination.name": "venue_topic",
			"messaging.operation.type": "process", "messaging.operation": "process"} {
			if a := attr(c.span, k); a != v {
				t.Errorf("%s: %s = %q, want %q", c.id, k, a, v)
			}
		}
	}

	// Tracing off: no span reaches the handler.
	plain, err := wrap(t, g, rocketmqmw.Config{Logger: testLogger(t)}, handler)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain(ctx, newMsg("m4", "", "SN-plain")); err != nil {
		t.Fatal(err)
	}
	if sc := inHandler["SN-plain"]; sc.IsValid() {
		t.Errorf("tracing off, yet the handler's context carries span %v", sc)
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}
