// SPDX-License-Identifier: Apache-2.0

package rocketmqmw

import (
	"context"
	"errors"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/msgtrace"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// outcomeKey records on the consumer span what the guard did: applied, duplicate,
// in_progress or failed (idempotency.Outcome).
const outcomeKey = attribute.Key("outbox.idempotency.outcome")

// noSpan is the span of a middleware without tracing: every method does nothing.
var noSpan = trace.SpanFromContext(context.Background())

// startSpan starts the consumer span "<topic> process" of one attempt at msg, a child of the
// trace context in the message's properties (the relay's producer span) or the root of a
// new trace when it has none, and returns ctx carrying it for the handler. Without a
// tracer it returns ctx and noSpan.
func (m *Middleware) startSpan(ctx context.Context, msg *primitive.MessageExt) (context.Context, trace.Span) {
	if m.tracer == nil {
		return ctx, noSpan
	}
	props := msg.GetProperties()
	id := props[outbox.MsgIDProperty] // the outbox msg_id, as the relay's span names it
	if id == "" {
		id = msg.MsgId
	}
	attrs := msgtrace.Attributes(msgtrace.Process, msg.Topic, id, msg.GetTags(), strings.Fields(msg.GetKeys()))
	pctx, opts := msgtrace.StartOptions(ctx, props, trace.SpanKindConsumer, attrs)
	return m.tracer.Start(pctx, msgtrace.SpanName(msg.Topic, msgtrace.Process), opts...)
}

// recordOutcome notes on span what the guard did with the delivery.
func recordOutcome(span trace.Span, res idempotency.Result) {
	if span.IsRecording() {
		span.SetAttributes(outcomeKey.String(res.Outcome.String()))
	}
}

// endSpan ends span; err, the attempt's error, marks it failed unless it only asks for a
// redelivery while another consumer holds the message (ErrInProgress).
func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, idempotency.ErrInProgress) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
