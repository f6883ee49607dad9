// SPDX-License-Identifier: Apache-2.0

// Package mysqlerr names the MySQL and MariaDB server errors the project acts on, so that
// the writer, the consumer guards and the operator commands read them one way.
package mysqlerr

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// Server error numbers shared by MySQL and MariaDB.
const (
	// UnknownColumn is ER_BAD_FIELD_ERROR: a statement named a column the table lacks.
	UnknownColumn = 1054
	// DuplicateEntry is ER_DUP_ENTRY: an insert hit a unique key.
	DuplicateEntry = 1062
	// LockWaitTimeout is ER_LOCK_WAIT_TIMEOUT: the statement gave up waiting for a row lock.
	LockWaitTimeout = 1205
	// Deadlock is ER_LOCK_DEADLOCK: InnoDB rolled the transaction back to break a deadlock.
	Deadlock = 1213
)

// Number returns the server error number carried by err, or 0 when err is not a server error.
func Number(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// Retryable reports a lock wait timeout or a deadlock: transient conflicts with another
// transaction that running the same work again resolves.
func Retryable(err error) bool {
	n := Number(err)
	return n == LockWaitTimeout || n == Deadlock
}
