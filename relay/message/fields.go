// SPDX-License-Identifier: Apache-2.0

package message

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Row is the columns of an outbox row that become its message.
type Row struct {
	ID                                          int64
	MsgID, Topic, Tag, Keys, ShardingKey, Props string
	Body                                        []byte
	// BodyLen is the body's length in the table (the body read may be cut short).
	BodyLen int64
}

// FromRow checks a row's fields as the relay does before it sends the row (body within
// maxBodyBytes, properties well-formed, msg_id, tag, keys, sharding key and properties
// unable to forge a property) and returns its message; an error is permanent: the row can
// never be sent as it is. The relay and the replay both call it.
func FromRow(r Row, maxBodyBytes int) (*Message, error) {
	if r.BodyLen > int64(maxBodyBytes) {
		return nil, fmt.Errorf("body is %d bytes, over the limit of %d (relay.max_body_bytes)", r.BodyLen, maxBodyBytes)
	}
	props, err := outbox.ParseProperties(r.Props)
	if err != nil {
		return nil, fmt.Errorf("malformed properties: %w", err)
	}
	keys := strings.Fields(r.Keys)
	if err := outbox.ValidateFields(outbox.Fields{MsgID: r.MsgID, Tag: r.Tag, Keys: keys, ShardingKey: r.ShardingKey, Properties: props}); err != nil {
		return nil, err // a plain-SQL writer's field would forge a property: never sent
	}
	return &Message{ID: r.ID, MsgID: r.MsgID, Topic: r.Topic, Tag: r.Tag, Keys: keys, ShardingKey: r.ShardingKey,
		Body: r.Body, Properties: props}, nil
}
