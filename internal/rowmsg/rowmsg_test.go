// SPDX-License-Identifier: Apache-2.0

package rowmsg

import (
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestBuildMapsEveryColumn(t *testing.T) {
	m := Build(Fields{MsgID: "m1", Topic: "T", Tag: "tg", Body: []byte("b"), Keys: []string{"k1", "k2"},
		ShardingKey: "order-7", MessageGroup: true, DelayLevel: 3,
		Properties: map[string]string{"user": "u", outbox.MsgIDProperty: "forged"}})
	want := map[string]string{
		primitive.PropertyTags: "tg", primitive.PropertyKeys: "k1 k2", primitive.PropertyShardingKey: "order-7",
		PropertyMessageGroup: "order-7", primitive.PropertyDelayTimeLevel: "3", "user": "u", outbox.MsgIDProperty: "m1",
	}
	for k, v := range want {
		if got := m.GetProperty(k); got != v {
			t.Errorf("property %s = %q, want %q", k, got, v)
		}
	}
	if m.Topic != "T" || string(m.Body) != "b" {
		t.Fatalf("topic %q body %q", m.Topic, m.Body)
	}
}

// TestBuildDefaults: without keys the msg_id is the key; a sharding key of an unordered
// route names no message group; no delay level without one.
func TestBuildDefaults(t *testing.T) {
	m := Build(Fields{MsgID: "m2", Topic: "T", ShardingKey: "s"})
	if m.GetProperty(primitive.PropertyKeys) != "m2" || m.GetProperty(PropertyMessageGroup) != "" ||
		m.GetProperty(primitive.PropertyDelayTimeLevel) != "" || m.GetProperty(primitive.PropertyTags) != "" {
		t.Fatalf("properties %v", m.GetProperties())
	}
}
