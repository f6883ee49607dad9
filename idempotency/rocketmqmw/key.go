// SPDX-License-Identifier: Apache-2.0

package rocketmqmw

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
)

// ErrNoKey is idempotency.ErrNoKey, for KeyFuncs written against this package.
var ErrNoKey = idempotency.ErrNoKey

// KeyFunc returns the business key of a message, usually the order number. It returns an
// error wrapping ErrNoKey when the message carries no key (or one that cannot be read); an
// empty key counts as missing too. The middleware then qualifies the key with an
// IdentityFunc, so that distinct events of one order are not taken for duplicates.
type KeyFunc func(msg *primitive.MessageExt) (string, error)

// KeyFromKeys takes all of the message's keys (msg.GetKeys()), joined by single spaces. The
// relay sends the outbox row's msg_keys there (the order number, and whatever else the
// producer added to tell events apart, such as a payment number), and its msg_id when
// msg_keys is empty. This is the default key.
func KeyFromKeys() KeyFunc {
	return func(msg *primitive.MessageExt) (string, error) {
		keys := strings.Fields(msg.GetKeys())
		if len(keys) == 0 {
			return "", fmt.Errorf("%w: no message keys", ErrNoKey)
		}
		return strings.Join(keys, " "), nil
	}
}

// KeyFromProperty takes the value of the user property name.
func KeyFromProperty(name string) KeyFunc {
	return func(msg *primitive.MessageExt) (string, error) {
		if v := msg.GetProperty(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no property %q", ErrNoKey, name)
	}
}

// KeyFromJSONField takes a field of the JSON object in the body. path is a field name or a
// dotted path into nested objects, such as "orderSn" or "message.orderSn" (seed 002 wraps
// its payload in a MessageWrapper). A string is used as it is, a number as written in the
// body (so 12345678901234567890 keeps its digits); null, an empty string, any other type, a
// missing field and a body that is not JSON all count as no key.
func KeyFromJSONField(path string) KeyFunc {
	parts := strings.Split(path, ".")
	return func(msg *primitive.MessageExt) (string, error) {
		var cur json.RawMessage = msg.Body
		for _, p := range parts {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(cur, &obj); err != nil {
				return "", fmt.Errorf("%w: body field %q: not a JSON object: %v", ErrNoKey, path, err)
			}
			v, ok := obj[p]
			if !ok {
				return "", fmt.Errorf("%w: body has no field %q", ErrNoKey, path)
			}
			cur = v
		}
		var s string
		if err := json.Unmarshal(cur, &s); err == nil {
			if s == "" {
				return "", fmt.Errorf("%w: body field %q is empty", ErrNoKey, path)
			}
			return s, nil
		}
		var n json.Number
		if err := json.Unmarshal(cur, &n); err == nil {
			if _, err := strconv.ParseFloat(string(n), 64); err == nil {
				return string(n), nil
			}
		}
		return "", fmt.Errorf("%w: body field %q is not a string or number: %s", ErrNoKey, path, truncate(string(cur), 64))
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// IdentityFunc turns a message's business key into the identity the guard dedupes on
// (within its consumer group). Two deliveries with the same identity are one event: the
// second is skipped. It must be a pure function of what a redelivery keeps: topic, tag,
// keys, properties and body.
type IdentityFunc func(msg *primitive.MessageExt, key string) string

// TopicTagIdentity is the default identity: topic, tag and key, as "topic:tag:key" (a ':'
// or '\' in the tag is escaped with '\'; topics cannot contain ':'). So a redelivery of
// "orders/paid SN-7001" is a duplicate, but "orders/paid SN-7001" after "orders/created
// SN-7001" is another event and is applied. The topic keeps its RocketMQ namespace
// ("tenantA%orders"): the topics of two namespaces are two topics on the broker, so one group
// consuming both never takes tenant A's event for tenant B's. A consumer with the client's
// namespace option and one subscribed to "namespace%topic" by name see the same msg.Topic and
// share identities.
func TopicTagIdentity(msg *primitive.MessageExt, key string) string {
	return topicTagKey(msg.Topic, msg.GetTags(), key)
}

// TopicTagIdentityWithoutNamespace is TopicTagIdentity with the topic's namespace dropped,
// the default identity of this package's earlier versions: it keeps the dedupe state of a group that ran
// such a version and consumes a single namespace. Two namespaces' events of one topic, tag
// and key share an identity under it, so never use it for a group that consumes several.
func TopicTagIdentityWithoutNamespace(msg *primitive.MessageExt, key string) string {
	return topicTagKey(TopicWithoutNamespace(msg.Topic), msg.GetTags(), key)
}

// topicTagKey joins topic, tag and key with ':', escaping ':' and '\' in the tag.
func topicTagKey(topic, tag, key string) string {
	return topic + ":" + strings.NewReplacer(`\`, `\\`, ":", `\:`).Replace(tag) + ":" + key
}

// TopicWithoutNamespace returns topic without a RocketMQ namespace: what follows its last '%'.
// A consumer created with consumer.WithNamespace("ns") is handed messages whose Topic is
// "ns%orders" (rocketmq-client-go does not strip it), as is one subscribed to "ns%orders";
// both are "orders" here. Plain topic names cannot contain '%' other than as that separator,
// so a topic without a namespace is returned unchanged.
func TopicWithoutNamespace(topic string) string {
	if i := strings.LastIndexByte(topic, '%'); i >= 0 {
		return topic[i+1:]
	}
	return topic
}

// KeyIdentity uses the key alone: at most one effect per key in the group, whatever the
// topic or tag. Use it only when every message of a key in the group is the same event
// (for example a group subscribed to one topic and one tag that carries the key of the
// event itself, not of its order).
func KeyIdentity(_ *primitive.MessageExt, key string) string { return key }

// fitKey keeps an identity within what every store holds (idempotency.MaxSQLKeyLen bytes):
// a longer one is replaced by "h:" and its SHA-256 in hex, which no unhashed identity of
// TopicTagIdentity looks like (those have at least two ':').
func fitKey(id string) string {
	if len(id) <= idempotency.MaxSQLKeyLen {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h:" + hex.EncodeToString(sum[:])
}
