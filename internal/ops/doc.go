// SPDX-License-Identifier: Apache-2.0

// Package ops holds the operator queries on an outbox table: Status (counts and backlog age),
// DeadList, Requeue and Purge. The CLI commands of the same names are thin wrappers, and the
// relay calls PurgeLoop to delete old sent rows periodically.
//
// Every statement is set-based and guarded by the status it expects, so each is safe while a
// relay runs: the relay only ever updates rows WHERE status IN (0,1), Requeue only touches
// rows WHERE status = 3 and Purge only deletes rows WHERE status = 2. All SQL lives in sql.go.
package ops
