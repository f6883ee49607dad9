// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"maps"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// The writer stores the caller's W3C trace context in the row's properties when the
// insert's context carries a span, beside the caller's own properties; a message that sets
// trace context itself keeps it; without a span nothing is added.
func TestInsertStoresTheCallersTraceContext(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	state, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
		TraceState: state,
	})
	traced := trace.ContextWithSpanContext(context.Background(), sc)
	const writerParent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	own := map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01", "shop": "7"}
	ownCopy := maps.Clone(own)
	props := map[string]string{"shop": "7"}
	msgs := []outbox.Message{
		{MsgID: "plain", Topic: "orders", Body: []byte("a")},
		{MsgID: "with-props", Topic: "orders", Body: []byte("b"), Properties: props},
		{MsgID: "own-context", Topic: "orders", Body: []byte("c"), Properties: own},
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.InsertMany(traced, tx, msgs); err != nil {
		t.Fatal(err)
	}
	if err := w.Insert(context.Background(), tx, &outbox.Message{MsgID: "no-span", Topic: "orders", Body: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	want := map[string]map[string]string{
		"plain":       {"traceparent": writerParent, "tracestate": "vendor=abc"},
		"with-props":  {"traceparent": writerParent, "tracestate": "vendor=abc", "shop": "7"},
		"own-context": ownCopy,
		"no-span":     nil,
	}
	for id, wantProps := range want {
		var col sql.NullString
		if err := db.QueryRow("SELECT properties FROM local_message WHERE msg_id = ?", id).Scan(&col); err != nil {
			t.Fatal(err)
		}
		got, err := outbox.ParseProperties(col.String)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if !maps.Equal(got, wantProps) {
			t.Errorf("%s: properties %v, want %v", id, got, wantProps)
		}
	}
	if len(props) != 1 || !maps.Equal(own, ownCopy) {
		t.Errorf("the caller's maps were changed: %v, %v", props, own)
	}
}
