// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/msgtrace"
)

// sendSpans are the producer spans of one send request, one per message; nil when tracing is
// off (Config.TracerProvider unset).
type sendSpans []trace.Span

// traceSend starts a producer span "<topic> publish" per message, each a child of the trace
// context its writer stored in the row (a new trace when the row has none), and returns the
// messages to publish: copies whose traceparent and tracestate are their span's, so that the
// consumer's span is a child of the relay's. The row and msgs keep the writer's context, so a
// retry, or the one-by-one resend of a refused batch, is again a child of the writer's span.
//
// One span per message rather than one per batch request keeps every message's chain in
// its writer's trace; a message sent in a batch request records the request's size in
// messaging.batch.message_count. With tracing off it returns msgs and costs nothing.
func (r *Engine) traceSend(ctx context.Context, msgs []*Message) ([]*Message, sendSpans) {
	if r.tracer == nil {
		return msgs, nil
	}
	out := make([]*Message, len(msgs))
	spans := make(sendSpans, len(msgs))
	for i, m := range msgs {
		attrs := msgtrace.Attributes(msgtrace.Publish, m.Topic, m.MsgID, m.Tag, m.Keys)
		if len(msgs) > 1 {
			attrs = append(attrs, msgtrace.BatchCount(len(msgs)))
		}
		pctx, opts := msgtrace.StartOptions(ctx, m.Properties, trace.SpanKindProducer, attrs)
		sctx, span := r.tracer.Start(pctx, msgtrace.SpanName(m.Topic, msgtrace.Publish), opts...)
		cp := *m
		cp.Properties = make(map[string]string, len(m.Properties)+2)
		maps.Copy(cp.Properties, m.Properties)
		delete(cp.Properties, msgtrace.TraceState) // the span's own, if any, replaces it
		maps.Copy(cp.Properties, msgtrace.Inject(sctx))
		out[i], spans[i] = &cp, span
	}
	return out, spans
}

// end ends the spans, marking them failed with err when the send failed.
func (s sendSpans) end(err error) {
	for _, span := range s {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
