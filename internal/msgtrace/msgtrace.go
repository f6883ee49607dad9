// SPDX-License-Identifier: Apache-2.0

// Package msgtrace carries W3C trace context (traceparent, tracestate) in outbox message
// properties, and names the OpenTelemetry spans and messaging attributes that the writer
// library, the relay and the consumer middleware share, so that the three read and write
// them one way: writer span -> relay producer span -> consumer span, one trace.
package msgtrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Property names of W3C trace context, as the properties column and RocketMQ user
// properties hold them.
const (
	TraceParent = "traceparent"
	TraceState  = "tracestate"
)

// ScopeName is the instrumentation scope of every span the project records.
const ScopeName = "github.com/outbox-relay/outbox-relay"

var propagator = propagation.TraceContext{}

// Tracer returns the project's tracer of tp, or nil when tp is nil: callers treat a nil
// tracer as tracing off and skip all work.
func Tracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer(ScopeName)
}

// Inject returns ctx's span context as properties (traceparent, and tracestate when it has
// one), or nil when ctx carries no valid span context.
func Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c
}

// Has reports whether props hold trace context of their own (traceparent or tracestate).
func Has(props map[string]string) bool {
	_, parent := props[TraceParent]
	_, state := props[TraceState]
	return parent || state
}

// Extract returns ctx carrying the remote span context of props' traceparent and tracestate,
// and whether props held a valid one.
func Extract(ctx context.Context, props map[string]string) (context.Context, bool) {
	if props[TraceParent] == "" {
		return ctx, false
	}
	out := propagator.Extract(ctx, propagation.MapCarrier(props))
	// Extract returns ctx itself when the traceparent is not valid.
	return out, out != ctx && trace.SpanContextFromContext(out).IsValid()
}

// StartOptions are the options of a span of kind about one message whose properties are
// props: a child of the props' trace context when they carry one (returned in ctx), else
// the root of a new trace, never a child of whatever span ctx held.
func StartOptions(ctx context.Context, props map[string]string, kind trace.SpanKind, attrs []attribute.KeyValue) (context.Context, []trace.SpanStartOption) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(attrs...)}
	pctx, ok := Extract(ctx, props)
	if !ok {
		opts = append(opts, trace.WithNewRoot())
	}
	return pctx, opts
}

// Operations, as messaging semantic conventions 1.26 name them in messaging.operation.type
// (and the older messaging.operation).
const (
	Publish = "publish"
	Process = "process"
)

// operationKey is messaging.operation, the key of semantic conventions before 1.26; set
// beside messaging.operation.type for backends that still read it.
const operationKey = attribute.Key("messaging.operation")

// Attributes returns the messaging attributes of operation op (Publish or Process) on one
// message: system rocketmq, destination topic, message id (the outbox msg_id), tag and keys.
func Attributes(op, topic, msgID, tag string, keys []string) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs,
		semconv.MessagingSystemRocketmq,
		semconv.MessagingDestinationName(topic),
		semconv.MessagingOperationTypeKey.String(op),
		operationKey.String(op),
	)
	if msgID != "" {
		attrs = append(attrs, semconv.MessagingMessageID(msgID))
	}
	if tag != "" {
		attrs = append(attrs, semconv.MessagingRocketmqMessageTag(tag))
	}
	if len(keys) > 0 {
		attrs = append(attrs, semconv.MessagingRocketmqMessageKeys(keys...))
	}
	return attrs
}

// BatchCount is messaging.batch.message_count: the number of messages in the send request.
func BatchCount(n int) attribute.KeyValue { return semconv.MessagingBatchMessageCount(n) }

// SpanName is the span name of operation op on topic: "<topic> <op>".
func SpanName(topic, op string) string { return topic + " " + op }
