// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"
	"time"
)

// The binary records producer spans only when the OTEL_* environment configures an exporter:
// with OTEL_TRACES_EXPORTER=console it prints a "<topic> publish" span in the writer's trace
// and publishes the span's own traceparent; a default run leaves the writer's traceparent as
// it is, the sign that no span was recorded. The rows keep the writer's context either way.
func TestBinaryTracesOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		writer  = "00-" + traceID + "-00f067aa0ba902b7-01"
	)
	unset := []string{"OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=", "OTEL_SDK_DISABLED="}
	for _, c := range []struct {
		name   string
		env    []string
		traced bool
	}{
		{"default", unset, false},
		{"console", append(unset, "OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=50"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if _, err := e.db.Exec("INSERT INTO local_message (msg_id, topic, content, msg_keys, properties) VALUES ('m-1', 'orders', 'x', 'SN1', ?)",
				`{"traceparent":"`+writer+`"}`); err != nil {
				t.Fatal(err)
			}
			p := e.startRelay(t, c.env...)
			eventually(t, 30*time.Second, "the row sent", func() bool { return e.count(t, "status = 2") == 1 })
			msgs := e.broker.Messages("orders")
			if len(msgs) != 1 {
				t.Fatalf("%d messages on the broker, want 1", len(msgs))
			}
			published := msgs[0].Properties["traceparent"]
			if c.traced {
				if !strings.HasPrefix(published, "00-"+traceID+"-") || published == writer {
					t.Errorf("published traceparent %q, want the producer span's in trace %s", published, traceID)
				}
				spanID := strings.Split(published, "-")[2]
				eventually(t, 30*time.Second, "the producer span printed", func() bool {
					out := p.Out.String()
					return strings.Contains(out, `"Name":"orders publish"`) && strings.Contains(out, spanID)
				})
			} else if published != writer {
				t.Errorf("default run published traceparent %q, want the writer's %q untouched", published, writer)
			}
			if n := e.count(t, "JSON_VALUE(properties, '$.traceparent') = ?", writer); n != 1 {
				t.Errorf("the row lost the writer's traceparent")
			}
		})
	}
}
