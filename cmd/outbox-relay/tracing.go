// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingEnv are the variables of which one must be set for the relay to record spans: a
// default run exports nothing and pays nothing for tracing.
var tracingEnv = []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}

// tracingConfigured reports whether getenv turns tracing on: one of tracingEnv set, and
// OTEL_SDK_DISABLED not "true".
func tracingConfigured(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	for _, k := range tracingEnv {
		if getenv(k) != "" {
			return true
		}
	}
	return false
}

// setupTracing returns the TracerProvider the standard OTEL_* environment configures
// (exporter through autoexport: otlp over http/protobuf by default, grpc, console or none;
// sampler from OTEL_TRACES_SAMPLER; resource from OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES, service.name defaulting to outbox-relay), and a shutdown that
// flushes the spans still buffered. It returns a nil provider, and a shutdown doing nothing,
// when tracing is not configured or OTEL_TRACES_EXPORTER is "none".
func setupTracing(ctx context.Context, log zerolog.Logger) (trace.TracerProvider, func(), error) {
	nothing := func() {}
	if !tracingConfigured(os.Getenv) {
		return nil, nothing, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		log.Info().Msg("tracing off: OTEL_TRACES_EXPORTER=none")
		return nil, nothing, nil
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the defaults.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "outbox-relay"), attribute.String("service.version", version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn().Err(err).Msg("tracing") }))
	exporter := os.Getenv("OTEL_TRACES_EXPORTER")
	if exporter == "" {
		exporter = "otlp"
	}
	log.Info().Str("exporter", exporter).Msg("tracing on: a producer span per message sent")
	return tp, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil {
			log.Warn().Err(err).Msg("tracing: flush at shutdown")
		}
	}, nil
}
