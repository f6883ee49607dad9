// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// storedOf returns where res says each of n messages sent in one request was stored. A
// batch is stored in one queue in its order at consecutive offsets from res.QueueOffset,
// and the broker answers one offset message id per message, comma-joined (RocketMQ 5.3.3
// and internal/rmqtest both); when the count of ids is not n, no id is recorded.
func storedOf(res *primitive.SendResult, n int) []message.Stored {
	if res == nil || res.MessageQueue == nil || n <= 0 {
		return nil
	}
	ids := strings.Split(res.OffsetMsgID, ",")
	out := make([]message.Stored, n)
	for i := range out {
		out[i] = message.Stored{Broker: res.MessageQueue.BrokerName, QueueID: res.MessageQueue.QueueId, Offset: res.QueueOffset + int64(i)}
		if len(ids) == n && len(ids[i]) <= 64 {
			out[i].OffsetMsgID = ids[i]
		}
	}
	return out
}

// noteStored sets each message's Stored from res.
func noteStored(res *primitive.SendResult, msgs []*message.Message) {
	for i, s := range storedOf(res, len(msgs)) {
		s := s
		msgs[i].Stored = &s
	}
}
