// SPDX-License-Identifier: Apache-2.0

// Package e2e holds the tests that run the real outbox-relay binary as a separate process
// against MariaDB, Redis and the in-process broker of internal/rmqtest: signals, kill -9 in
// the middle of a stream, and two relays competing for the lock. It has no non-test code.
package e2e
