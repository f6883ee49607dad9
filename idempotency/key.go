package idempotency

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// KeyFunc returns the idempotency key of a message. It returns an error wrapping ErrNoKey
// when the message carries no key (or one that cannot be read); an empty key counts as
// missing too.
type KeyFunc func(msg *primitive.MessageExt) (string, error)

// KeyFromKeys takes the first of the message's keys (msg.GetKeys(), space-separated). The
// relay sends the outbox row's msg_keys there, the order number in seed 002, and its msg_id
// when msg_keys is empty. This is the default key.
func KeyFromKeys() KeyFunc {
	return func(msg *primitive.MessageExt) (string, error) {
		keys := strings.Fields(msg.GetKeys())
		if len(keys) == 0 {
			return "", fmt.Errorf("%w: no message keys", ErrNoKey)
		}
		return keys[0], nil
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
