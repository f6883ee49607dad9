// SPDX-License-Identifier: Apache-2.0

package brokeraudit_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// send sends n messages to topic as the relay does (one SendSync each, OUTBOX_MSG_ID set)
// through the name server ns, and returns where the broker said it stored each one.
func send(t *testing.T, ns, topic string, n int) []brokeraudit.Position {
	t.Helper()
	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithInstanceName("audit-"+testenv.RandomSuffix(8)),
		producer.WithGroupName("audit-test"),
		producer.WithRetry(0),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown() }()
	prefix := testenv.RandomSuffix(6)
	out := make([]brokeraudit.Position, 0, n)
	for i := range n {
		id := fmt.Sprintf("%s-%04d", prefix, i)
		msg := primitive.NewMessage(topic, []byte("body "+id)).WithKeys([]string{id})
		msg.WithProperty(brokeraudit.PropMsgID, id)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := p.SendSync(ctx, msg)
		cancel()
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", id, res, err)
		}
		out = append(out, brokeraudit.Position{
			Topic: topic, Broker: res.MessageQueue.BrokerName, QueueID: res.MessageQueue.QueueId,
			Offset: res.QueueOffset, OffsetMsgID: res.OffsetMsgID, MsgID: id, SentAt: time.Now(),
		})
	}
	return out
}

// check runs a Check that must not fail as a whole.
func check(t *testing.T, l brokeraudit.Lookup, ps []brokeraudit.Position) []brokeraudit.Finding {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fs, err := l.Check(ctx, ps)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(fs) != len(ps) {
		t.Fatalf("Check answered %d findings for %d positions", len(fs), len(ps))
	}
	return fs
}

// expect compares each finding's verdict with want(position) and logs one reason per verdict.
func expect(t *testing.T, ps []brokeraudit.Position, fs []brokeraudit.Finding, want func(brokeraudit.Position) brokeraudit.Verdict) {
	t.Helper()
	logged := map[brokeraudit.Verdict]bool{}
	for i, f := range fs {
		if w := want(ps[i]); f.Verdict != w {
			t.Errorf("%s (queue %d offset %d): verdict %v (%s), want %v", ps[i].MsgID, ps[i].QueueID, ps[i].Offset, f.Verdict, f.Reason, w)
		} else if !logged[f.Verdict] {
			logged[f.Verdict] = true
			t.Logf("verdict %v: %s", f.Verdict, f.Reason)
		}
	}
}

func always(v brokeraudit.Verdict) func(brokeraudit.Position) brokeraudit.Verdict {
	return func(brokeraudit.Position) brokeraudit.Verdict { return v }
}
