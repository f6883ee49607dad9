// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// The classifier, with no broker: each answer of the failure-accounting table of
// docs/decisions.md read as its kind. A publisher makes no connection until its first Send,
// and only "route info not found" asks a name server (here one that does not answer).

func classifyPublisher(t *testing.T, requireReplication bool) *RocketMQPublisher {
	t.Helper()
	p, err := NewRocketMQPublisher(RocketMQConfig{NameServers: []string{"127.0.0.1:1"}, AccessKey: "relay-ak",
		RequireReplication: requireReplication})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func brokerAnswer(code int16, desc string) error {
	return &BrokerError{Broker: "127.0.0.1:10911", Err: primitive.MQBrokerErr{ResponseCode: code, ErrorMessage: desc}}
}

func TestClassifyFailureAccountingTable(t *testing.T) {
	p := classifyPublisher(t, false)
	cases := []struct {
		row   string
		err   error
		batch bool
		want  SendErrorKind
	}{
		{"MESSAGE_ILLEGAL 13: the message itself", brokerAnswer(13, "the message body size over max value"), false, SendPermanent},
		{"a batch refused as a request (SYSTEM_ERROR size exceeded)", brokerAnswer(1, "message body size exceeded"), true, SendRefused},
		{"a single message too large (SYSTEM_ERROR size exceeded)", brokerAnswer(1, "message body size exceeded"), false, SendPermanent},
		{"any other code: the broker refused this message", brokerAnswer(25, "subscription not latest"), false, SendRefused},
		{"TOPIC_NOT_EXIST 17", brokerAnswer(17, "topic[x] not exist"), false, SendTopicMissing},
		{"NO_PERMISSION 16 from ACL", brokerAnswer(16, "[PERMISSION_DENIED] no permission to access Topic x"), false, SendMisconfigured},
		{"ACL 1.0 signature refused", brokerAnswer(1, "check signature failed"), false, SendMisconfigured},
		{"a FIFO/NORMAL topic type mismatch", brokerAnswer(1, "TopicMessageType validate failed"), false, SendMisconfigured},
		{"a proxy needing bname", brokerAnswer(15, "bname is empty"), false, SendMisconfigured},
		{"connection refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), false, SendUnreachable},
		{"no route to host (text)", errors.New("dial tcp 10.0.0.9:10911: connect: no route to host"), false, SendUnreachable},
		{"route info not found, no name server answering", errors.New("the topic=orders route info not found, it may not exist"), false, SendUnreachable},
		{"timeout", errors.New("wait response timeout"), false, SendTransient},
		{"reset connection", errors.New("read tcp: connection reset by peer"), false, SendTransient},
		{"SYSTEM_ERROR 1", brokerAnswer(1, "store error"), false, SendTransient},
		{"SYSTEM_BUSY 2", brokerAnswer(2, "[TIMEOUT_CLEAN_QUEUE]broker busy"), false, SendTransient},
		{"SERVICE_NOT_AVAILABLE 14", brokerAnswer(14, "service not available now"), false, SendTransient},
		{"NO_PERMISSION 16 of a read-only broker", brokerAnswer(16, "the broker[a] sending message is forbidden"), false, SendTransient},
	}
	for _, c := range cases {
		got := p.classify(context.Background(), c.err, "orders", c.batch)
		if k := KindOf(got); k != c.want {
			t.Errorf("%s: classified %s (%v), want %s", c.row, k, got, c.want)
		}
		if k := KindOf(got); k != SendUnreachable && BrokerOf(got) == "" && BrokerOf(c.err) != "" {
			t.Errorf("%s: the broker of the answer is lost: %v", c.row, got)
		}
	}
}

func TestClassifyStoredMeansSent(t *testing.T) {
	for _, st := range []primitive.SendStatus{primitive.SendSlaveNotAvailable, primitive.SendFlushSlaveTimeout, primitive.SendFlushDiskTimeout} {
		res := &primitive.SendResult{Status: st, MessageQueue: &primitive.MessageQueue{BrokerName: "broker-a"}}
		if err := classifyPublisher(t, false).storedStatus(res, "orders", 1); err != nil {
			t.Errorf("status %d: %v, want sent (stored on the master)", st, err)
		}
		err := classifyPublisher(t, true).storedStatus(res, "orders", 1)
		if k := KindOf(err); err == nil || k != SendUnreplicated {
			t.Errorf("status %d with require_replication: %v (%s), want unreplicated", st, err, k)
		}
	}
}
