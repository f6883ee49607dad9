// SPDX-License-Identifier: Apache-2.0

package auditor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// On Apache RocketMQ 5.3.3, a batch send's positions as the publisher records them (the first
// queue offset plus the message's index, the i-th of the broker's comma-joined offset message
// ids) are where the broker stored each message: the broker lookup finds every one present,
// and each id is its own.
func TestBatchPositionsOnApacheRocketMQ(t *testing.T) {
	ns := testenv.RocketMQ(t)
	topic := "audit_batch_" + testenv.RandomSuffix(8)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{ns})))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(testenv.RocketMQBroker()),
		admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
		t.Fatal(err)
	}
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{ns}, SendTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var ps []brokeraudit.Position
	for round := 0; round < 3; round++ {
		msgs := make([]*relay.Message, 8)
		for i := range msgs {
			id := fmt.Sprintf("b%d-%02d-%s", round, i, testenv.RandomSuffix(4))
			msgs[i] = &relay.Message{MsgID: id, Topic: topic, Keys: []string{id}, Body: []byte("batch " + id)}
		}
		testenv.Eventually(t, 30*time.Second, "a batch sent to "+topic, func() bool {
			return pub.Send(ctx, relay.Route{}, msgs...) == nil
		})
		t.Logf("batch %d: %s queue %d offsets %d.., ids %s..", round, msgs[0].Stored.Broker, msgs[0].Stored.QueueID, msgs[0].Stored.Offset, msgs[0].Stored.OffsetMsgID)
		seen := map[string]bool{}
		for i, m := range msgs {
			s := m.Stored
			if s == nil || s.Offset != msgs[0].Stored.Offset+int64(i) || s.OffsetMsgID == "" || seen[s.OffsetMsgID] || strings.Contains(s.OffsetMsgID, ",") {
				t.Fatalf("message %d of a batch recorded %+v; want consecutive offsets and one offset msg id each", i, s)
			}
			seen[s.OffsetMsgID] = true
			ps = append(ps, brokeraudit.Position{Topic: topic, Broker: s.Broker, QueueID: s.QueueID, Offset: s.Offset,
				OffsetMsgID: s.OffsetMsgID, MsgID: m.MsgID, SentAt: time.Now()})
		}
	}
	found, err := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{ns}}).Check(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 24 || len(ps) != 24 {
		t.Fatalf("looked up %d of %d positions; want 24", len(found), len(ps))
	}
	for i, f := range found {
		if f.Verdict != brokeraudit.Present {
			t.Errorf("%s at %s/%d/%d: verdict %d (%s); want present", ps[i].MsgID, ps[i].Broker, ps[i].QueueID, ps[i].Offset, f.Verdict, f.Reason)
		}
	}
}
