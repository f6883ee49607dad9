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

// Server errors that refuse every write of the connection's server: the server is read-only
// (a replica, or an old primary left running read-only by a failover).
const (
	// OptionPreventsStatement is ER_OPTION_PREVENTS_STATEMENT: "running with the --read-only
	// option" (MySQL and MariaDB; Aurora's old writer during a failover).
	OptionPreventsStatement = 1290
	// ReadOnlyMode is ER_READ_ONLY_MODE (MySQL): super_read_only or innodb_read_only is on.
	ReadOnlyMode = 1836
	// ReadOnlyTransaction is ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: an Aurora reader, or a
	// session whose transactions are read-only.
	ReadOnlyTransaction = 1792
	// InnoDBReadOnly is ER_INNODB_READ_ONLY: InnoDB was started with innodb_read_only.
	InnoDBReadOnly = 1874
	// ReadLocked is ER_CANT_UPDATE_WITH_READLOCK: the server holds a global read lock (FLUSH
	// TABLES WITH READ LOCK, as some switchover tools take before they move the writer).
	ReadLocked = 1223
	// UnknownCommand is ER_UNKNOWN_COM_ERROR, which a Galera node that left the primary
	// component gives to every statement ("WSREP has not yet prepared node").
	UnknownCommand = 1047
)

// ReadOnly reports the server's refusal of any write: it is read-only or write-locked, so
// that the connection must be dialled again (after a failover the address leads to the new
// primary) rather than the statement repeated on it.
func ReadOnly(err error) bool {
	switch Number(err) {
	case OptionPreventsStatement, ReadOnlyMode, ReadOnlyTransaction, InnoDBReadOnly, ReadLocked, UnknownCommand:
		return true
	}
	return false
}

// Server errors that refuse a statement for the values of the rows it writes.
const (
	// OutOfRange is ER_WARN_DATA_OUT_OF_RANGE: a value does not fit its column (strict mode).
	OutOfRange = 1264
	// DataTooLong is ER_DATA_TOO_LONG: a string is wider than its column (strict mode).
	DataTooLong = 1406
	// Truncated is WARN_DATA_TRUNCATED, an error under strict mode.
	Truncated = 1265
	// IncorrectValue is ER_TRUNCATED_WRONG_VALUE_FOR_FIELD: a value the column cannot hold.
	IncorrectValue = 1366
	// TruncatedWrongValue is ER_TRUNCATED_WRONG_VALUE.
	TruncatedWrongValue = 1292
	// BadNull is ER_BAD_NULL_ERROR: NULL into a NOT NULL column.
	BadNull = 1048
	// ValueOutOfRange is ER_DATA_OUT_OF_RANGE: arithmetic on a row's value overflowed.
	ValueOutOfRange = 1690
	// TriggerSignal is ER_SIGNAL_EXCEPTION: a trigger refused the row (SIGNAL SQLSTATE '45000').
	TriggerSignal = 1644
	// CheckFailed is ER_CHECK_CONSTRAINT_VIOLATED (MySQL 8).
	CheckFailed = 3819
	// ConstraintFailed is ER_CONSTRAINT_FAILED (MariaDB): a CHECK constraint refused the row.
	ConstraintFailed = 4025
)

// RowSpecific reports a refusal caused by the values of the rows a statement writes (one
// row's value out of range, too long, refused by a constraint or a trigger): the same
// statement for other rows may pass, so the rows must be written one at a time to find the
// one at fault.
func RowSpecific(err error) bool {
	switch Number(err) {
	case OutOfRange, DataTooLong, Truncated, IncorrectValue, TruncatedWrongValue, BadNull,
		ValueOutOfRange, TriggerSignal, CheckFailed, ConstraintFailed:
		return true
	}
	return false
}
