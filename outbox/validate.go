// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Limits of the table contract and of RocketMQ that Insert and the relay enforce.
const (
	// MaxTopicLen is RocketMQ's limit on a topic name.
	MaxTopicLen = 127
	// MaxTagLen is the width of the tag column.
	MaxTagLen = 200
	// MaxMsgIDLen is the width of the msg_id column.
	MaxMsgIDLen = 64
	// MaxKeysLen is the width of the msg_keys column (all keys joined by spaces).
	MaxKeysLen = 512
	// MaxShardingKeyLen is the width of the sharding_key column.
	MaxShardingKeyLen = 128
	// DefaultMaxBodyBytes is RocketMQ's default maximum message size (4 MiB).
	DefaultMaxBodyBytes = 4 << 20
	// MsgIDProperty is the user property under which the relay sends each row's msg_id.
	MsgIDProperty = "OUTBOX_MSG_ID"
	// TableProperty names the outbox table of a transactional half's row (outbox/txmsg), so
	// that the relay answering the half's check-backs reads the right table.
	TableProperty = "OUTBOX_TABLE"
	// WriterProperty marks a half whose row was inserted before it was sent: "c" by
	// outbox/txmsg (a check that finds no row and no open transaction may roll it back), "h"
	// by a writer of handed rows (status 4; docs/transactional.md).
	WriterProperty = "OUTBOX_TX"
)

var topicRE = regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)

// ValidateTopic checks name by RocketMQ's topic rules: 1 to 127 characters of letters,
// digits, '_', '-', '%' or '|', and not one of the broker's system topics.
func ValidateTopic(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("topic is empty")
	case len(name) > MaxTopicLen:
		return fmt.Errorf("topic %q is %d characters, over RocketMQ's limit of %d", name, len(name), MaxTopicLen)
	case !topicRE.MatchString(name):
		return fmt.Errorf("topic %q has characters RocketMQ refuses (allowed: letters, digits, _ - %% |)", name)
	case name == "TBW102" || name == "SCHEDULE_TOPIC_XXXX" || name == "RMQ_SYS_TRANS_HALF_TOPIC" ||
		strings.HasPrefix(name, "rmq_sys_") || strings.HasPrefix(name, "RMQ_SYS_") ||
		strings.HasPrefix(name, "%RETRY%") || strings.HasPrefix(name, "%DLQ%"):
		return fmt.Errorf("topic %q is reserved by the broker", name)
	}
	return nil
}

// ValidateTag checks a RocketMQ tag: at most 200 characters, no "||" (the subscription
// separator), not "*" (the subscription wildcard), no control characters. Empty is allowed.
func ValidateTag(tag string) error {
	switch {
	case len(tag) > MaxTagLen:
		return fmt.Errorf("tag is %d characters, over the limit of %d", len(tag), MaxTagLen)
	case tag == "*":
		return fmt.Errorf("tag %q is the subscription wildcard and cannot be a message's tag", tag)
	case strings.Contains(tag, "||"):
		return fmt.Errorf("tag %q contains \"||\", RocketMQ's tag separator in subscriptions", tag)
	case hasControl(tag):
		return fmt.Errorf("tag %q contains control characters", tag)
	}
	return nil
}

// reservedProperties are property names RocketMQ's client or broker set themselves; a user
// property of that name would change how the message is handled.
var reservedProperties = map[string]bool{
	"KEYS": true, "TAGS": true, "WAIT": true, "DELAY": true, "RETRY_TOPIC": true,
	"REAL_TOPIC": true, "REAL_QID": true, "TRAN_MSG": true, "PGROUP": true, "MIN_OFFSET": true,
	"MAX_OFFSET": true, "BUYER_ID": true, "ORIGIN_MESSAGE_ID": true, "TRANSFER_FLAG": true,
	"CORRECTION_FLAG": true, "MQ2_FLAG": true, "RECONSUME_TIME": true, "MSG_REGION": true,
	"TRACE_ON": true, "UNIQ_KEY": true, "MAX_RECONSUME_TIMES": true, "CONSUME_START_TIME": true,
	"TRAN_PREPARED_QUEUE_OFFSET": true, "TRANSACTION_CHECK_TIMES": true, "CHECK_IMMUNITY_TIME_IN_SECONDS": true,
	"SHARDING_KEY": true, "__SHARDINGKEY": true, "__STARTDELIVERTIME": true, "INSTANCE_ID": true,
	"CLUSTER": true, "MSG_TYPE": true, "REPLY_TO_CLIENT": true, "CORRELATION_ID": true, "TTL": true,
	MsgIDProperty: true, TableProperty: true, WriterProperty: true, SignatureProperty: true,
}

// ValidateProperties checks user properties: non-empty names that RocketMQ does not reserve,
// and no name or value containing the protocol's separators (bytes 1 and 2).
func ValidateProperties(props map[string]string) error {
	for k, v := range props {
		switch {
		case k == "":
			return fmt.Errorf("property name is empty")
		case reservedProperties[k]:
			return fmt.Errorf("property %q is reserved by RocketMQ or the relay", k)
		case strings.ContainsAny(k, "\x01\x02") || strings.ContainsAny(v, "\x01\x02"):
			return fmt.Errorf("property %q contains bytes 1 or 2, RocketMQ's property separators", k)
		}
	}
	return nil
}

// ParseProperties decodes the properties column: empty means none; otherwise a JSON object
// of string values that ValidateProperties accepts.
func ParseProperties(column string) (map[string]string, error) {
	if strings.TrimSpace(column) == "" {
		return nil, nil
	}
	var props map[string]string
	if err := json.Unmarshal([]byte(column), &props); err != nil {
		return nil, fmt.Errorf("properties are not a JSON object of strings: %w", err)
	}
	if err := ValidateProperties(props); err != nil {
		return nil, err
	}
	return props, nil
}

// ValidateKeys checks message keys: each non-empty and without spaces (keys are stored
// joined by single spaces, as RocketMQ does), and all of them within the msg_keys column.
func ValidateKeys(keys []string) error {
	total := 0
	for _, k := range keys {
		if k == "" {
			return fmt.Errorf("a message key is empty")
		}
		if strings.ContainsAny(k, " \t\r\n") || hasControl(k) {
			return fmt.Errorf("message key %q contains white space or control characters", k)
		}
		total += len(k) + 1
	}
	if total-1 > MaxKeysLen {
		return fmt.Errorf("message keys take %d characters joined, over the limit of %d", total-1, MaxKeysLen)
	}
	return nil
}

// ValidateBody checks that a body fits the limit and can be stored in the text column.
func ValidateBody(body []byte, maxBytes int) error {
	if len(body) > maxBytes {
		return fmt.Errorf("body is %d bytes, over the limit of %d", len(body), maxBytes)
	}
	if !utf8.Valid(body) {
		return fmt.Errorf("body is not valid UTF-8 (the content column is text: encode binary bodies, e.g. base64)")
	}
	return nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// MaxPropertyBytes bounds the RocketMQ properties a message's fields make: every name and
// value with its two separator bytes, the keys, tag, sharding key and msg_id among them.
// RocketMQ's proxy refuses user properties over 16 KiB, and the Go client writes a batched
// message's properties with a 16-bit length that larger ones would wrap, spilling bytes that
// the broker would read as the next message. 1 KiB of the 16 is left to the properties the
// client and the relay add (UNIQ_KEY, WAIT, DELAY, trace context).
const MaxPropertyBytes = 15 << 10

// MaxProperties is the most user properties a message may carry: the RocketMQ proxy's limit.
const MaxProperties = 128

// ErrInvalidField is matched by errors.Is for every *FieldError.
var ErrInvalidField = errors.New("outbox: field cannot travel as a RocketMQ property")

// FieldError reports a message field that would forge or break a RocketMQ property: a control
// character (RocketMQ joins properties with bytes 1 and 2, unescaped) or too many property
// bytes. Field is the table column (msg_id, msg_keys, sharding_key, tag, properties).
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalidField) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalidField }

// Fields are the parts of a message that the relay sends as RocketMQ properties.
type Fields struct {
	MsgID       string
	Tag         string
	Keys        []string
	ShardingKey string
	Properties  map[string]string
}

// ValidateFields checks that f travels as the properties it says and no others: a msg_id,
// no control character (bytes 0-31 and 127, the separators 1 and 2 among them) in the
// msg_id, keys, sharding key, tag or a property's name or value, at most MaxProperties
// properties, and at most MaxPropertyBytes of them in all. The Writer refuses a message that
// fails with a *FieldError; the relay parks such a row dead with the error as its reason,
// unsent.
func ValidateFields(f Fields) error {
	if f.MsgID == "" {
		return &FieldError{Field: "msg_id", Reason: "empty (NULL or '' in the table): a message needs its id"}
	}
	if err := controlFree("msg_id", f.MsgID); err != nil {
		return err
	}
	if err := controlFree("tag", f.Tag); err != nil {
		return err
	}
	// KEYS holds the keys joined by spaces, or the msg_id when there are none; the msg_id
	// also goes as OUTBOX_MSG_ID.
	keysLen := len(f.MsgID)
	if len(f.Keys) > 0 {
		keysLen = len(f.Keys) - 1
	}
	for _, k := range f.Keys {
		if err := controlFree("msg_keys", k); err != nil {
			return err
		}
		keysLen += len(k)
	}
	size := len("KEYS") + keysLen + 2 + propertySize(MsgIDProperty, f.MsgID)
	if err := controlFree("sharding_key", f.ShardingKey); err != nil {
		return err
	}
	if f.Tag != "" {
		size += propertySize("TAGS", f.Tag)
	}
	if f.ShardingKey != "" {
		size += propertySize("SHARDING_KEY", f.ShardingKey)
	}
	if len(f.Properties) > MaxProperties {
		return &FieldError{Field: "properties", Reason: fmt.Sprintf("%d properties, over RocketMQ's limit of %d", len(f.Properties), MaxProperties)}
	}
	for k, v := range f.Properties {
		if err := controlFree("properties", k); err != nil {
			return err
		}
		if err := controlFree("properties", v); err != nil {
			return &FieldError{Field: "properties", Reason: fmt.Sprintf("value of %q: %s", k, err.(*FieldError).Reason)}
		}
		size += propertySize(k, v)
	}
	if size > MaxPropertyBytes {
		return &FieldError{Field: "properties", Reason: fmt.Sprintf(
			"the message's properties (keys, tag, sharding key, msg_id and user properties) take %d bytes, over the limit of %d", size, MaxPropertyBytes)}
	}
	return nil
}

// propertySize is the bytes one property takes in RocketMQ's encoding: name 0x01 value 0x02.
func propertySize(name, value string) int { return len(name) + len(value) + 2 }

// controlFree returns a *FieldError naming the first control character of s, without
// quoting s itself (it may be long, and is the attacker's text).
func controlFree(field, s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			why := "a control character"
			if c == 1 || c == 2 {
				why = "a RocketMQ property separator"
			}
			return &FieldError{Field: field, Reason: fmt.Sprintf("byte %d is 0x%02x, %s: it would forge or break the message's properties", i, c, why)}
		}
	}
	return nil
}
