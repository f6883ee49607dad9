// SPDX-License-Identifier: Apache-2.0

// Package brokeraudit asks a broker whether it still holds messages it acknowledged: the
// auditor's view of the broker. The relay records where each acknowledged message was
// stored (Position); a Lookup says for each position whether the message is there.
package brokeraudit

import (
	"context"
	"time"
)

// Position is where a broker said it stored one message, as recorded in the row.
type Position struct {
	// Topic is the topic the message was sent to, as the broker names it (namespace
	// included where one is used).
	Topic string
	// Broker is the broker name of the send result's queue.
	Broker string
	// QueueID and Offset are the queue and the queue offset of the send result.
	QueueID int
	Offset  int64
	// OffsetMsgID is the broker's offset message id (store host and commit log offset); it
	// may be empty.
	OffsetMsgID string
	// MsgID is the row's msg_id, which the message carries as its OUTBOX_MSG_ID property.
	MsgID string
	// SentAt is when the row was marked sent.
	SentAt time.Time
}

// Verdict is what a Lookup found for one position.
type Verdict int

const (
	// Present: the broker holds the message at its position.
	Present Verdict = iota + 1
	// Missing: the broker acknowledged the message and no longer holds it (queue truncated
	// below the offset, another message at the offset, the queue's tail gone).
	Missing
	// Unknown: the broker could not tell (unreachable, aged out by retention, not served).
	Unknown
)

// Finding is a Lookup's answer for one position.
type Finding struct {
	Verdict Verdict
	// Reason says why, for the row's fail_reason and the logs (e.g. "lost by broker
	// broker-a after acknowledgement: queue 3 ends at offset 17 below 42").
	Reason string
}

// Lookup asks brokers about positions.
type Lookup interface {
	// Probe returns nil when the deployment's brokers can be asked, and otherwise an error
	// that says why not (for example a proxy that does not serve the lookup).
	Probe(ctx context.Context) error
	// Check answers for each position, in order. An error means none could be checked.
	Check(ctx context.Context, ps []Position) ([]Finding, error)
}
