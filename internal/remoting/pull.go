// SPDX-License-Identifier: Apache-2.0

package remoting

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// PullMessage reads messages of one queue from a broker.
const PullMessage int16 = 11

// Answers to PullMessage besides success.
const (
	codePullNotFound               = 19
	codePullRetryImmediately       = 20
	codePullOffsetMoved            = 21
	flagSubscription         int32 = 1 << 2 // PullSysFlag.FLAG_SUBSCRIPTION: the subscription is in the request
)

// ErrTopicNotExist marks a broker's answer that it holds no such topic.
var ErrTopicNotExist = errors.New("topic not on this broker")

// Pulled is one answer to Pull.
type Pulled struct {
	// Messages are the messages read, in queue order; none when the queue holds nothing at
	// the offset asked for.
	Messages []*Message
	// Next is the offset to read from next (the queue's first offset when the one asked for
	// was trimmed away).
	Next int64
	// MinOffset and MaxOffset are the queue's first offset and the offset after its last
	// message, as the broker answered them.
	MinOffset, MaxOffset int64
}

// Pull reads up to max messages of a topic's queue from offset, as consumer group group
// without suspending (the broker creates the group's subscription where
// autoCreateSubscriptionGroup allows it). A topic the broker does not hold gives
// ErrTopicNotExist.
func (c *Conn) Pull(ctx context.Context, group, topic string, queue int, offset int64, max int) (*Pulled, error) {
	ext := map[string]string{
		"consumerGroup":        group,
		"topic":                topic,
		"queueId":              strconv.Itoa(queue),
		"queueOffset":          strconv.FormatInt(offset, 10),
		"maxMsgNums":           strconv.Itoa(max),
		"sysFlag":              strconv.Itoa(int(flagSubscription)),
		"commitOffset":         "0",
		"suspendTimeoutMillis": "0",
		"subscription":         "*",
		"subVersion":           "0",
		"expressionType":       "TAG",
	}
	resp, err := c.Invoke(ctx, PullMessage, ext, nil)
	if err != nil {
		return nil, err
	}
	p := &Pulled{}
	p.Next, _ = strconv.ParseInt(resp.Ext["nextBeginOffset"], 10, 64)
	p.MinOffset, _ = strconv.ParseInt(resp.Ext["minOffset"], 10, 64)
	p.MaxOffset, _ = strconv.ParseInt(resp.Ext["maxOffset"], 10, 64)
	switch resp.Code {
	case 0:
		msgs, err := DecodeMessages(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("remoting: pull %s from %s: %w", topic, c.addr, err)
		}
		p.Messages = msgs
		return p, nil
	case codePullNotFound, codePullRetryImmediately, codePullOffsetMoved:
		return p, nil
	case topicNotExist:
		return nil, fmt.Errorf("remoting: pull %s from %s: %w", topic, c.addr, ErrTopicNotExist)
	}
	return nil, answerError(c.addr, "pull "+topic, resp)
}

// DecodeMessages decodes the messages of a pull's body, one after another.
func DecodeMessages(b []byte) ([]*Message, error) {
	var out []*Message
	for len(b) > 0 {
		if len(b) < 4 {
			return out, errShort
		}
		n := int(binary.BigEndian.Uint32(b))
		if n <= 0 || n > len(b) {
			return out, errShort
		}
		m, err := DecodeMessage(b[:n])
		if err != nil {
			return out, err
		}
		out = append(out, m)
		b = b[n:]
	}
	return out, nil
}
