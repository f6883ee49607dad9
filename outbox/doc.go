// Package outbox is the library a Go service uses to write outbox messages inside its own
// database transaction, so that a message exists if and only if the business change that
// caused it was committed.
//
// A Writer inserts Message values with one multi-row INSERT into the caller's *sql.Tx (or
// anything with ExecContext), validating them first by RocketMQ's rules so that a bad
// message fails in the service, not later in the relay. After the transaction commits, the
// service may call Writer.Nudge so the relay publishes at once instead of at its next poll.
//
// Services in other languages write the same row with plain SQL: see schema.InsertSQL and
// docs/sql-recipes.md. The relay applies the same validation to such rows and marks the
// invalid ones dead with a reason.
package outbox
