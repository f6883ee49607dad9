// SPDX-License-Identifier: Apache-2.0

// Package txcheck answers RocketMQ's transactional check-backs from the outbox table: every
// relay process registers the configured check groups with every master broker, answers each
// CHECK_TRANSACTION_STATE from the row the half names (docs/transactional.md's decision
// table), and makes the handed rows (status 4) of halves the broker discarded pending again,
// so that the relay sends them.
package txcheck
