// SPDX-License-Identifier: Apache-2.0

package remoting

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Request codes of a broker's queue and store lookups.
const (
	// GetEarliestMsgStoreTime asks a broker for the store time of a queue's oldest message.
	GetEarliestMsgStoreTime int16 = 32
	// ViewMessageByID asks a broker for the message at a commit log offset.
	ViewMessageByID int16 = 33
)

// ErrNoRoute marks a name server's answer that it knows no route for a topic.
var ErrNoRoute = errors.New("topic has no route on the name server")

// ErrNoMessage marks a broker's answer that it holds no message at a commit log offset.
var ErrNoMessage = errors.New("no message at that commit log offset")

// Route is a topic's route as a name server answers it.
type Route struct {
	// Masters maps each broker name holding the topic to its master's address (broker id
	// 0); a broker name whose master is gone is left out.
	Masters map[string]string
	// ReadQueues maps each broker name to the number of queues the topic can be read from.
	ReadQueues map[string]int
}

// TopicRoute asks the name server at addr for topic's route. A topic it does not know gives
// ErrNoRoute.
func TopicRoute(ctx context.Context, addr, topic string, opts ...Option) (*Route, error) {
	resp, err := Call(ctx, addr, GetRouteInfoByTopic, map[string]string{"topic": topic}, nil, opts...)
	if err != nil {
		return nil, err
	}
	switch resp.Code {
	case 0:
	case topicNotExist:
		return nil, fmt.Errorf("remoting: %s: %s: %w", addr, topic, ErrNoRoute)
	case codeRequestCodeNotSupported:
		return nil, fmt.Errorf("remoting: %s answered code %d: %s: %w", addr, resp.Code, resp.Remark, ErrNotSupported)
	default:
		return nil, fmt.Errorf("remoting: %s answered code %d: %s", addr, resp.Code, resp.Remark)
	}
	var body struct {
		BrokerDatas []struct {
			BrokerName  string            `json:"brokerName"`
			BrokerAddrs map[string]string `json:"brokerAddrs"`
		} `json:"brokerDatas"`
		QueueDatas []struct {
			BrokerName    string `json:"brokerName"`
			ReadQueueNums int    `json:"readQueueNums"`
		} `json:"queueDatas"`
	}
	if err := json.Unmarshal(quoteNumberKeys(resp.Body), &body); err != nil {
		return nil, fmt.Errorf("remoting: route of %s from %s: %w", topic, addr, err)
	}
	r := &Route{Masters: map[string]string{}, ReadQueues: map[string]int{}}
	for _, bd := range body.BrokerDatas {
		if a := bd.BrokerAddrs["0"]; a != "" {
			r.Masters[bd.BrokerName] = a
		}
	}
	for _, qd := range body.QueueDatas {
		r.ReadQueues[qd.BrokerName] = qd.ReadQueueNums
	}
	return r, nil
}

// EarliestStoreTime asks the broker for the store time (epoch milliseconds) of the oldest
// message it keeps in a topic's queue; -1 when the queue holds none.
func (c *Conn) EarliestStoreTime(ctx context.Context, topic string, queue int) (int64, error) {
	ext := map[string]string{"topic": topic, "queueId": strconv.Itoa(queue)}
	resp, err := c.Invoke(ctx, GetEarliestMsgStoreTime, ext, nil)
	if err != nil {
		return 0, err
	}
	if err := answerError(c.addr, "earliest store time", resp); err != nil {
		return 0, err
	}
	ts, err := strconv.ParseInt(resp.Ext["timestamp"], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("remoting: earliest store time from %s: %q: %w", c.addr, resp.Ext["timestamp"], err)
	}
	return ts, nil
}

// ViewMessage asks the broker for the message stored at a commit log offset (the last 8
// bytes of an offset message id). A broker that holds none there gives ErrNoMessage.
func (c *Conn) ViewMessage(ctx context.Context, commitLogOffset int64) (*Message, error) {
	ext := map[string]string{"offset": strconv.FormatInt(commitLogOffset, 10)}
	resp, err := c.Invoke(ctx, ViewMessageByID, ext, nil)
	if err != nil {
		return nil, err
	}
	// RocketMQ answers SYSTEM_ERROR with this remark when nothing is stored there.
	if resp.Code == 1 && strings.HasPrefix(resp.Remark, "can not find message by the offset") {
		return nil, fmt.Errorf("remoting: %s at %d: %w", c.addr, commitLogOffset, ErrNoMessage)
	}
	if err := answerError(c.addr, "view message", resp); err != nil {
		return nil, err
	}
	m, err := DecodeMessage(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("remoting: view message at %d from %s: %w", commitLogOffset, c.addr, err)
	}
	return m, nil
}

// answerError turns a broker's non-zero answer into an error (nil for success), with
// ErrNotSupported and ErrNoPermission to match.
func answerError(addr, what string, resp *Response) error {
	switch resp.Code {
	case 0:
		return nil
	case codeRequestCodeNotSupported:
		return fmt.Errorf("remoting: %s from %s: code %d: %s: %w", what, addr, resp.Code, resp.Remark, ErrNotSupported)
	case codeNoPermission:
		return fmt.Errorf("remoting: %s from %s: %w: %s", what, addr, ErrNoPermission, resp.Remark)
	}
	return fmt.Errorf("remoting: %s from %s: code %d: %s", what, addr, resp.Code, resp.Remark)
}
