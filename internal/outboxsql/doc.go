// SPDX-License-Identifier: Apache-2.0

// Package outboxsql holds the statements the relay's engine runs against its outbox table,
// behind one Store per table: the page query and the idle probe (store.go), the ordered
// check (ordercheck.go), parking and the parked rows' heads (park.go), and the guarded,
// set-based write-backs (store.go). A due row as a page reads it is a Row. Every status
// change reaches its rows through the primary key and is guarded by the status and retry
// count read, so that a newer state is never overwritten.
package outboxsql
