// SPDX-License-Identifier: Apache-2.0

package remoting

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// QueryMessage is the request code of a lookup in a broker's message index.
const QueryMessage int16 = 12

const (
	codeQueryNotFound = 22
	codeNoPermission  = 16
)

// ErrNoPermission is matched by errors.Is when a broker with ACL refuses a request to the
// connection's user.
var ErrNoPermission = errors.New("remoting: no permission")

// Stored reports whether the broker holds a message of topic whose unique key (UNIQ_KEY,
// the transaction id of a committed half) is uniqKey, looked up in its index
// (QUERY_MESSAGE; the index holds unique keys and KEYS alike, under topic and key). The
// index is hashed, so every message it returns is compared. The clients' _UNIQUE_KEY_QUERY
// flag is not sent: brokers with ACL leave it out of the signed content, so a signed request
// carrying it fails ("check signature failed"). A broker without the message index
// (messageIndexEnable=false) reports nothing found.
func (c *Conn) Stored(ctx context.Context, topic, uniqKey string) (bool, error) {
	ext := map[string]string{
		"topic":          topic,
		"key":            uniqKey,
		"maxNum":         "32",
		"beginTimestamp": "0",
		"endTimestamp":   strconv.FormatInt(math.MaxInt64, 10),
	}
	resp, err := c.Invoke(ctx, QueryMessage, ext, nil)
	if err != nil {
		return false, fmt.Errorf("remoting: query %s in %s: %w", uniqKey, topic, err)
	}
	switch resp.Code {
	case codeQueryNotFound:
		return false, nil
	case 0:
	case codeNoPermission:
		return false, fmt.Errorf("remoting: query %s in %s at %s: %w: %s", uniqKey, topic, c.addr, ErrNoPermission, resp.Remark)
	default:
		return false, fmt.Errorf("remoting: query %s in %s at %s: code %d: %s", uniqKey, topic, c.addr, resp.Code, resp.Remark)
	}
	msgs, err := DecodeMessages(resp.Body)
	if err != nil {
		return false, fmt.Errorf("remoting: query %s in %s at %s: %w", uniqKey, topic, c.addr, err)
	}
	for _, m := range msgs {
		if m.Topic == topic && m.Properties["UNIQ_KEY"] == uniqKey {
			return true, nil
		}
	}
	return false, nil
}
