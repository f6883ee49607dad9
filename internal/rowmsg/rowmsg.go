// SPDX-License-Identifier: Apache-2.0

// Package rowmsg builds the RocketMQ message of an outbox row: the one mapping of a row's
// columns to a message's topic, tag, keys, sharding key, delay, user properties and the
// OUTBOX_MSG_ID property, shared by the relay and the half-message writer (outbox/txmsg),
// so that a message reads the same whichever of the two sent it.
package rowmsg

import (
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// PropertyMessageGroup is the message property RocketMQ 5.x reads as a FIFO message's group
// ("__SHARDINGKEY"; rocketmq-client-go names only 4.x's SHARDING_KEY).
const PropertyMessageGroup = "__SHARDINGKEY"

// Fields are what a message is built from: a row's columns and its route's choices.
type Fields struct {
	// MsgID is the row's msg_id: the OUTBOX_MSG_ID property, and the key when Keys is empty.
	MsgID string
	// Topic, Tag and Body are the row's columns, byte for byte.
	Topic string
	Tag   string
	Body  []byte
	// Keys are the RocketMQ keys (the msg_keys column split on spaces).
	Keys []string
	// ShardingKey chooses the queue by hash; empty for none.
	ShardingKey string
	// MessageGroup also names ShardingKey as the RocketMQ 5.x message group, for a route to
	// a FIFO topic.
	MessageGroup bool
	// DelayLevel is the route's delay level; 0 for none.
	DelayLevel int
	// Properties are the user properties (the properties column).
	Properties map[string]string
}

// Build returns the message of f. The user properties are set after the tag and keys and
// OUTBOX_MSG_ID last, so that no user property can replace the msg_id a consumer dedupes by.
func Build(f Fields) *primitive.Message {
	pm := primitive.NewMessage(f.Topic, f.Body)
	if f.Tag != "" {
		pm.WithTag(f.Tag)
	}
	if len(f.Keys) > 0 {
		pm.WithKeys(f.Keys)
	} else {
		pm.WithProperty(primitive.PropertyKeys, f.MsgID) // WithKeys of one key, without its slice
	}
	if f.ShardingKey != "" {
		pm.WithShardingKey(f.ShardingKey)
		if f.MessageGroup {
			// RocketMQ 5.x reads the message group of a FIFO topic here (SHARDING_KEY is
			// 4.x's, kept for the queue hash): FIFO consumers then keep the key's order, and
			// a 5.x proxy accepts the message on a FIFO topic (and refuses it on a NORMAL one).
			pm.WithProperty(PropertyMessageGroup, f.ShardingKey)
		}
	}
	if f.DelayLevel > 0 {
		pm.WithDelayTimeLevel(f.DelayLevel)
	}
	for k, v := range f.Properties {
		pm.WithProperty(k, v)
	}
	pm.WithProperty(outbox.MsgIDProperty, f.MsgID)
	return pm
}
