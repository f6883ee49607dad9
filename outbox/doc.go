// SPDX-License-Identifier: Apache-2.0

// Package outbox is the library a Go service uses to write outbox messages inside its own
// database transaction, so that a message exists if and only if the business change that
// caused it was committed.
//
// A Writer inserts Message values through the caller's transaction (Insert for one,
// InsertMany for a slice, one multi-row INSERT per 1,000 messages), validating them first by
// RocketMQ's rules so that a bad message fails in the service, not later in the relay, and
// setting generated msg_ids on the caller's messages. The transaction is an outbox.Tx, which
// a *sql.DB is not, so a message cannot leave the business transaction by mistake;
// InsertNoTx is the explicit non-transactional variant for backfills and tools. After the
// transaction commits, the service may call Writer.NudgeFor (or Writer.Nudge) so the relay
// publishes at once instead of at its next poll: the nudge is an outbox.Nudger, in Redis with
// package outbox/redisnudge, so that services that do not nudge do not import go-redis.
// NudgeFor names the messages' partitions, so that the relays of a partitioned table
// (relay.partitions) wake only the partitions holding them.
//
// Services in other languages write the same row with plain SQL: see schema.InsertSQL and
// docs/sql-recipes.md. The relay applies the same validation to such rows and marks the
// invalid ones dead with a reason.
//
// When the insert's context carries an OpenTelemetry span, the writer stores its W3C trace
// context (traceparent, tracestate) in the row's properties, so that the relay's and the
// consumer's spans continue the caller's trace.
package outbox
