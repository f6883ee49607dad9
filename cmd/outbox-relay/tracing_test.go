// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// Tracing is on only when an exporter or an OTLP endpoint is configured, and
// OTEL_SDK_DISABLED=true turns it off (docs/configuration.md, "Tracing").
func TestTracingOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_SERVICE_NAME": "relay-eu", "OTEL_TRACES_SAMPLER": "always_on"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, true}, // configured; setupTracing then returns no provider
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		if got := tracingConfigured(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: tracing on %v, want %v", c.env, got, c.want)
		}
	}
}

func TestSetupTracingFromTheEnvironment(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		exporter string
		on       bool
		err      string
	}{
		{"", false, ""},
		{"none", false, ""},
		{"console", true, ""},
		{"zipkin", false, "OTEL_TRACES_EXPORTER"},
	} {
		t.Run("exporter="+c.exporter, func(t *testing.T) {
			for _, k := range tracingEnv {
				t.Setenv(k, "")
			}
			t.Setenv("OTEL_SDK_DISABLED", "")
			t.Setenv("OTEL_TRACES_EXPORTER", c.exporter)
			tp, shutdown, err := setupTracing(ctx, zerolog.Nop())
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer shutdown()
			if (tp != nil) != c.on {
				t.Fatalf("provider %v, want one: %v", tp, c.on)
			}
		})
	}
}
