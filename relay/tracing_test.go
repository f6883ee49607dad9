// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestTraceChainsWriterRelayConsumer follows messages from the writer's transaction to the
// consumer's handler with real MariaDB, Redis, the rmqtest broker and the real push consumer,
// each side with its own TracerProvider as in three processes: every message's writer span,
// relay producer span and consumer span share one trace id, the producer span is a child
// of the writer's, the consumer span a child of the producer's, and the handler runs in the
// consumer span. It covers a batch request of several messages, a message sent on its own,
// and a row written with plain SQL carrying a traceparent in its properties JSON
// (docs/sql-recipes.md). The rows keep the writer's traceparent.
func TestTraceChainsWriterRelayConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	provider := func() *sdktrace.TracerProvider {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return tp
	}
	service, relayTP, consumerTP := provider(), provider(), provider()
	topic := "orders_" + testenv.RandomSuffix(6)

	// The service: one order with three messages in one transaction (they go in one batch
	// request), one with a sharding key (sent on its own), each inside its writer span.
	writerSpans := map[string]trace.SpanContext{} // by msg_id
	write := func(name string, msgs ...outbox.Message) {
		sctx, span := service.Tracer("orders-service").Start(ctx, name)
		defer span.End()
		tx, err := b.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.writer.InsertMany(sctx, tx, msgs); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			writerSpans[m.MsgID] = span.SpanContext()
		}
	}
	write("place order", outbox.Message{MsgID: "m-a1", Topic: topic, Tag: "created", Keys: []string{"SN1"}, Body: []byte("a1")},
		outbox.Message{MsgID: "m-a2", Topic: topic, Tag: "created", Keys: []string{"SN2"}, Body: []byte("a2")},
		outbox.Message{MsgID: "m-a3", Topic: topic, Tag: "created", Keys: []string{"SN3"}, Body: []byte("a3")})
	write("pay order", outbox.Message{MsgID: "m-b", Topic: topic, Tag: "paid", Keys: []string{"SN4"}, ShardingKey: "SN4", Body: []byte("b")})
	// A plain-SQL writer: the traceparent of its own span in the properties JSON.
	plain := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:  trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	if _, err := b.db.Exec("INSERT INTO local_message (msg_id, topic, tag, content, msg_keys, properties) VALUES (?, ?, 'created', 'c', 'SN5', ?)",
		"m-c", topic, `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`); err != nil {
		t.Fatal(err)
	}
	writerSpans["m-c"] = plain
	want := len(writerSpans)

	// The consumer: the Redis-guarded middleware with its own provider, recording the span
	// context each handler call runs in.
	store, err := idempotency.NewRedisStore(b.rdb, idempotency.RedisConfig{KeyPrefix: b.prefix + "idem:"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.NewGuard(store, idempotency.Config{Group: "stock"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	handled := map[string]trace.SpanContext{} // by msg_id
	mw, err := rocketmqmw.New(guard, rocketmqmw.Config{TracerProvider: consumerTP}, func(ctx context.Context, msg *primitive.MessageExt) error {
		mu.Lock()
		defer mu.Unlock()
		handled[msg.GetProperty(outbox.MsgIDProperty)] = trace.SpanContextFromContext(ctx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mw.Close)
	startPushConsumer(t, b.broker.NameServerAddr(), topic, mw.Consume)

	cfg := b.config()
	cfg.TracerProvider = relayTP
	run(t, b.newRelay(t, cfg))
	eventually(t, 60*time.Second, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == want
	})
	eventually(t, 10*time.Second, "the consumer spans ended", func() bool {
		return len(byName(spans.GetSpans(), topic+" process")) == want
	})

	producers := byMsgID(t, byName(spans.GetSpans(), topic+" publish"))
	consumers := byMsgID(t, byName(spans.GetSpans(), topic+" process"))
	batched := []string{"m-a1", "m-a2", "m-a3", "m-c"} // the messages without a sharding key
	for id, writer := range writerSpans {
		p, c := producers[id], consumers[id]
		if p == nil || c == nil {
			t.Errorf("%s: producer span %v, consumer span %v; want both", id, p != nil, c != nil)
			continue
		}
		tid := writer.TraceID()
		if p.SpanContext.TraceID() != tid || c.SpanContext.TraceID() != tid {
			t.Errorf("%s: trace ids writer %s, producer %s, consumer %s; want one", id, tid, p.SpanContext.TraceID(), c.SpanContext.TraceID())
		}
		if p.Parent.SpanID() != writer.SpanID() {
			t.Errorf("%s: producer span's parent is %s, want the writer's span %s", id, p.Parent.SpanID(), writer.SpanID())
		}
		if c.Parent.SpanID() != p.SpanContext.SpanID() {
			t.Errorf("%s: consumer span's parent is %s, want the producer span %s", id, c.Parent.SpanID(), p.SpanContext.SpanID())
		}
		if h := handled[id]; h.SpanID() != c.SpanContext.SpanID() {
			t.Errorf("%s: the handler ran in span %s, want the consumer span %s", id, h.SpanID(), c.SpanContext.SpanID())
		}
		if p.SpanKind != trace.SpanKindProducer || c.SpanKind != trace.SpanKindConsumer {
			t.Errorf("%s: span kinds %s and %s, want producer and consumer", id, p.SpanKind, c.SpanKind)
		}
		wantP := map[string]string{
			"messaging.system": "rocketmq", "messaging.destination.name": topic, "messaging.operation.type": "publish",
			"messaging.operation": "publish", "messaging.message.id": id,
		}
		if slices.Contains(batched, id) {
			wantP["messaging.batch.message_count"] = fmt.Sprint(len(batched))
		}
		checkAttrs(t, id+" producer", p.Attributes, wantP)
		checkAttrs(t, id+" consumer", c.Attributes, map[string]string{
			"messaging.system": "rocketmq", "messaging.destination.name": topic, "messaging.operation.type": "process",
			"messaging.operation": "process", "messaging.message.id": id, "outbox.idempotency.outcome": "applied",
		})
		for _, span := range []*tracetest.SpanStub{p, c} {
			if attr(span.Attributes, "messaging.rocketmq.message.tag") == "" || attr(span.Attributes, "messaging.rocketmq.message.keys") == "" {
				t.Errorf("%s %s: no tag or keys attribute: %v", id, span.Name, span.Attributes)
			}
		}
		if !slices.Contains(batched, id) && attr(p.Attributes, "messaging.batch.message_count") != "" {
			t.Errorf("%s was sent on its own but its span has messaging.batch.message_count", id)
		}
		// The row keeps the writer's context; the message carried the producer's.
		var props string
		if err := b.db.QueryRow("SELECT properties FROM local_message WHERE msg_id = ?", id).Scan(&props); err != nil {
			t.Fatal(err)
		}
		rowProps, err := outbox.ParseProperties(props)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rowProps["traceparent"], traceparent(writer); got != want {
			t.Errorf("%s: row's traceparent %q, want the writer's %q", id, got, want)
		}
	}
}

// startPushConsumer subscribes consume to topic with a real push consumer, shut down at the
// end of the test.
func startPushConsumer(t *testing.T, nameSrv, topic string, consume func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)) {
	t.Helper()
	group := "stock-" + testenv.RandomSuffix(6)
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName(group),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance(group),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, consume); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
}

func byName(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// byMsgID indexes spans by their messaging.message.id; a message with two spans (a retry,
// a redelivery) fails the test: nothing here fails or is redelivered.
func byMsgID(t *testing.T, spans tracetest.SpanStubs) map[string]*tracetest.SpanStub {
	t.Helper()
	out := map[string]*tracetest.SpanStub{}
	for i, s := range spans {
		id := attr(s.Attributes, "messaging.message.id")
		if out[id] != nil {
			t.Errorf("two %q spans for message %s", s.Name, id)
		}
		out[id] = &spans[i]
	}
	return out
}

func checkAttrs(t *testing.T, what string, got []attribute.KeyValue, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g := attr(got, k); g != v {
			t.Errorf("%s: %s = %q, want %q", what, k, g, v)
		}
	}
}

func attr(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}

func traceparent(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-%s", sc.TraceID(), sc.SpanID(), sc.TraceFlags())
}
