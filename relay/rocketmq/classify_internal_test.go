// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// The classifier, with no broker: each answer of the failure-accounting table of
// docs/decisions.md read as its kind. A publisher makes no connection until its first Send,
// and only "route info not found" asks a name server (here one that does not answer).

func classifyPublisher(t *testing.T, requireReplication bool) *Publisher {
	t.Helper()
	p, err := NewPublisher(Config{NameServers: []string{"127.0.0.1:1"}, AccessKey: "relay-ak",
		RequireReplication: requireReplication})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func brokerAnswer(code int16, desc string) error {
	return atBroker("127.0.0.1:10911", primitive.MQBrokerErr{ResponseCode: code, ErrorMessage: desc})
}

func TestClassifyFailureAccountingTable(t *testing.T) {
	p := classifyPublisher(t, false)
	cases := []struct {
		row   string
		err   error
		batch bool
		want  message.SendErrorKind
	}{
		{"MESSAGE_ILLEGAL 13: the message itself", brokerAnswer(13, "the message body size over max value"), false, message.SendPermanent},
		{"a batch refused as a request (SYSTEM_ERROR size exceeded)", brokerAnswer(1, "message body size exceeded"), true, message.SendRefused},
		{"a single message too large (SYSTEM_ERROR size exceeded)", brokerAnswer(1, "message body size exceeded"), false, message.SendPermanent},
		{"any other code: the broker refused this message", brokerAnswer(25, "subscription not latest"), false, message.SendRefused},
		{"TOPIC_NOT_EXIST 17", brokerAnswer(17, "topic[x] not exist"), false, message.SendTopicMissing},
		{"NO_PERMISSION 16 from ACL", brokerAnswer(16, "[PERMISSION_DENIED] no permission to access Topic x"), false, message.SendMisconfigured},
		{"ACL 1.0 signature refused", brokerAnswer(1, "check signature failed"), false, message.SendMisconfigured},
		{"a FIFO/NORMAL topic type mismatch", brokerAnswer(1, "TopicMessageType validate failed"), false, message.SendMisconfigured},
		{"a proxy needing bname", brokerAnswer(15, "bname is empty"), false, message.SendMisconfigured},
		{"connection refused", fmt.Errorf("dial: %w", syscall.ECONNREFUSED), false, message.SendUnreachable},
		{"no route to host (text)", errors.New("dial tcp 10.0.0.9:10911: connect: no route to host"), false, message.SendUnreachable},
		{"route info not found, no name server answering", errors.New("the topic=orders route info not found, it may not exist"), false, message.SendUnreachable},
		{"a queue chosen before its broker's address was stored", errors.New("topic=orders route info not found"), false, message.SendTransient},
		{"timeout", errors.New("wait response timeout"), false, message.SendTransient},
		{"reset connection", errors.New("read tcp: connection reset by peer"), false, message.SendTransient},
		{"SYSTEM_ERROR 1", brokerAnswer(1, "store error"), false, message.SendTransient},
		{"SYSTEM_BUSY 2", brokerAnswer(2, "[TIMEOUT_CLEAN_QUEUE]broker busy"), false, message.SendTransient},
		{"SERVICE_NOT_AVAILABLE 14", brokerAnswer(14, "service not available now"), false, message.SendTransient},
		{"NO_PERMISSION 16 of a read-only broker", brokerAnswer(16, "the broker[a] sending message is forbidden"), false, message.SendTransient},
	}
	for _, c := range cases {
		got := p.classify(context.Background(), c.err, "orders", c.batch)
		if strings.HasPrefix(c.err.Error(), "topic=") && !errors.Is(got, errRouteUnsettled) {
			t.Errorf("%s: %v is not marked to be sent again at once", c.row, got)
		}
		if k := message.KindOf(got); k != c.want {
			t.Errorf("%s: classified %s (%v), want %s", c.row, k, got, c.want)
		}
		if k := message.KindOf(got); k != message.SendUnreachable && message.BrokerOf(got) == "" && message.BrokerOf(c.err) != "" {
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
		if k := message.KindOf(err); err == nil || k != message.SendUnreplicated {
			t.Errorf("status %d with require_replication: %v (%s), want unreplicated", st, err, k)
		}
	}
}
