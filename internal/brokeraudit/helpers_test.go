// SPDX-License-Identifier: Apache-2.0

package brokeraudit_test

import (
	"context"
	"fmt"
	"os"
	"strings"
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
	return sendBatches(t, ns, topic, n, 1)
}

// sendBatches is send with batch messages per request (the relay's batch_send): the broker
// answers the first message's queue offset and the offset message ids joined by commas, and
// the batch's messages are stored one after another in one queue.
func sendBatches(t *testing.T, ns, topic string, n, batch int) []brokeraudit.Position {
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
	for i := 0; i < n; i += batch {
		var msgs []*primitive.Message
		for j := i; j < min(n, i+batch); j++ {
			id := fmt.Sprintf("%s-%04d", prefix, j)
			msg := primitive.NewMessage(topic, []byte("body "+id)).WithKeys([]string{id})
			msg.WithProperty(brokeraudit.PropMsgID, id)
			msgs = append(msgs, msg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := p.SendSync(ctx, msgs...)
		cancel()
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d messages: %v %v", len(msgs), res, err)
		}
		ids := strings.Split(res.OffsetMsgID, ",")
		for j, m := range msgs {
			p := brokeraudit.Position{
				Topic: topic, Broker: res.MessageQueue.BrokerName, QueueID: res.MessageQueue.QueueId,
				Offset: res.QueueOffset + int64(j), MsgID: m.GetProperty(brokeraudit.PropMsgID), SentAt: time.Now(),
			}
			if len(ids) == len(msgs) {
				p.OffsetMsgID = ids[j]
			}
			out = append(out, p)
		}
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

// reasonsSay checks that every finding of verdict v gives a reason containing want.
func reasonsSay(t *testing.T, ps []brokeraudit.Position, fs []brokeraudit.Finding, v brokeraudit.Verdict, want string) {
	t.Helper()
	for i, f := range fs {
		if f.Verdict == v && !strings.Contains(f.Reason, want) {
			t.Errorf("%s: reason %q does not say %q", ps[i].MsgID, f.Reason, want)
		}
	}
}
