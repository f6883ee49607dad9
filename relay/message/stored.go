// SPDX-License-Identifier: Apache-2.0

package message

// Stored is where the broker said it stored an acknowledged message: what the relay records
// in the table's audit columns, and what the broker audit checks later.
type Stored struct {
	// Broker is the name of the broker whose queue holds the message.
	Broker string
	// QueueID and Offset are the queue and the message's offset in it.
	QueueID int
	Offset  int64
	// OffsetMsgID is the broker's offset message id (store address and commit log offset);
	// empty when the broker gave none for this message.
	OffsetMsgID string
}
