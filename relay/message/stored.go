// SPDX-License-Identifier: Apache-2.0

package message

import (
	"encoding/binary"
	"encoding/hex"
	"math"
)

// Stored is where the broker said it stored an acknowledged message: what the relay records
// in the table's stored-position journal, and what the broker audit checks later.
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

// CommitLogOffset returns the commit log offset of OffsetMsgID: the id is the hex of the
// store host (4 bytes of IPv4 or 16 of IPv6 address, 4 of port) followed by 8 bytes of
// offset. ok is false when OffsetMsgID is not such an id.
func (s *Stored) CommitLogOffset() (offset int64, ok bool) {
	b, err := hex.DecodeString(s.OffsetMsgID)
	if err != nil || (len(b) != 16 && len(b) != 28) {
		return 0, false
	}
	off := binary.BigEndian.Uint64(b[len(b)-8:])
	if off > math.MaxInt64 {
		return 0, false
	}
	return int64(off), true
}
