// Package relay is the delivery engine: it publishes every committed outbox row to RocketMQ
// at least once, retries failures on a backoff schedule, and parks what cannot be delivered
// as dead for an operator.
//
// One Relay serves one table. While it holds the table's Redis lock it repeatedly reads the
// due rows (status pending or failed, next_retry_time passed, not deleted) in pages that walk
// the (status, next_retry_time) index, so a tick costs in proportion to the due rows and not
// to the table's history of sent rows. Each page is routed (Router), published with bounded
// concurrency (Publisher; messages of one topic go in batch requests where the route
// allows), and its results written back with a few set-based, status-guarded UPDATEs.
//
// The lock is a courtesy, not a fence: every write is conditional on the row still being
// pending or failed, so two relays at once can only publish a row twice, never lose it or
// overwrite a newer state. Consumers dedupe with package idempotency.
//
// With Config.TracerProvider set, every message sent gets an OpenTelemetry producer span, a
// child of the writer's trace context stored in the row, whose own context the message
// carries on to the consumer (docs/configuration.md, "Tracing").
package relay
