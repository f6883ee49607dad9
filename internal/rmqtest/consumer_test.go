// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// received collects what a push consumer was given, by the "seq" property.
type received struct {
	mu   sync.Mutex
	msgs map[string][]*primitive.MessageExt
}

func newReceived() *received { return &received{msgs: map[string][]*primitive.MessageExt{}} }

func (r *received) add(m *primitive.MessageExt) {
	r.mu.Lock()
	r.msgs[m.GetProperty("seq")] = append(r.msgs[m.GetProperty("seq")], m)
	r.mu.Unlock()
}

func (r *received) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *received) get(seq string) []*primitive.MessageExt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*primitive.MessageExt(nil), r.msgs[seq]...)
}

func collect(r *received) func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	return func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			r.add(m)
		}
		return consumer.ConsumeSuccess, nil
	}
}

func TestPushConsumerReceivesEverything(t *testing.T) {
	s := startServer(t, Options{})
	const topic = "Events"
	p := newProducer(t, s)

	// Half sent before the consumers start, half after: both halves must arrive
	// (the first through the group's initial offset 0, the rest through long polls).
	const total = 400
	want := map[string][]byte{}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			m, body := testMessage(topic, i)
			want[strconv.Itoa(i)] = body
			if _, err := p.send(5*time.Second, m); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
		}
	}
	send(0, total/2)

	groups := []string{"groupA", "groupB"}
	recv := map[string]*received{}
	var consumers []consumerHandle
	for _, g := range groups {
		r := newReceived()
		recv[g] = r
		c := newPushConsumer(t, s, g)
		if err := c.c.Subscribe(topic, consumer.MessageSelector{}, collect(r)); err != nil {
			t.Fatal(err)
		}
		if err := c.c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.c.Shutdown() })
		consumers = append(consumers, c)
	}
	send(total/2, total)

	for _, g := range groups {
		r := recv[g]
		waitFor(t, 20*time.Second, g+" to receive every message", func() bool { return r.distinct() == total })
		for seq, body := range want {
			ms := r.get(seq)
			m := ms[0]
			i, _ := strconv.Atoi(seq)
			if m.Topic != topic || m.GetTags() != fmt.Sprintf("tag%d", i%3) || m.GetKeys() != fmt.Sprintf("order-%d k%d", i, i) {
				t.Fatalf("%s msg %s: topic %q tags %q keys %q", g, seq, m.Topic, m.GetTags(), m.GetKeys())
			}
			if !bytes.Equal(m.Body, body) {
				t.Fatalf("%s msg %s: body differs", g, seq)
			}
			if m.GetProperty("trace") != fmt.Sprintf("trace-%d-ünï", i) || m.ReconsumeTimes != 0 {
				t.Fatalf("%s msg %s: trace %q reconsume %d", g, seq, m.GetProperty("trace"), m.ReconsumeTimes)
			}
			stored := s.QueueMessages(topic, m.Queue.QueueId)[m.QueueOffset]
			if stored.Properties["seq"] != seq || m.MsgId != stored.MsgID || m.OffsetMsgId != stored.OffsetMsgID ||
				m.StoreTimestamp != stored.StoreTimestamp || m.BornTimestamp != stored.BornTimestamp || m.StoreTimestamp == 0 {
				t.Fatalf("%s msg %s: ids/timestamps differ from the store: %v vs %+v", g, seq, m, stored)
			}
		}
	}
	// The groups commit their progress to the broker (at the latest when they shut down).
	for _, c := range consumers {
		_ = c.c.Shutdown()
	}
	waitFor(t, 20*time.Second, "committed offsets", func() bool {
		for _, g := range groups {
			sum := int64(0)
			for q := 0; q < 4; q++ {
				sum += max(s.ConsumerOffset(g, topic, q), 0)
			}
			if sum != total {
				return false
			}
		}
		return true
	})
}

func TestConsumeRetryLaterRedeliversWithRisingReconsumeTimes(t *testing.T) {
	s := startServer(t, Options{})
	const topic = "Flaky"
	p := newProducer(t, s)
	const n = 5
	const failures = 3 // each message fails 3 times, then succeeds

	var mu sync.Mutex
	counts := map[string][]int32{}
	topics := map[string][]string{}
	c := newPushConsumer(t, s, "retryGroup")
	c.run(t, topic, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		res := consumer.ConsumeSuccess
		for _, m := range msgs {
			seq := m.GetProperty("seq")
			counts[seq] = append(counts[seq], m.ReconsumeTimes)
			topics[seq] = append(topics[seq], m.Topic)
			if len(counts[seq]) <= failures {
				res = consumer.ConsumeRetryLater
			}
		}
		return res, nil
	})
	for i := 0; i < n; i++ {
		m := primitive.NewMessage(topic, []byte("body-"+strconv.Itoa(i)))
		m.WithProperty("seq", strconv.Itoa(i))
		if _, err := p.send(5*time.Second, m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "every message to be consumed 4 times", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := 0; i < n; i++ {
			if len(counts[strconv.Itoa(i)]) < failures+1 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	for i := 0; i < n; i++ {
		seq := strconv.Itoa(i)
		if fmt.Sprint(counts[seq]) != "[0 1 2 3]" {
			t.Errorf("msg %s: reconsume times %v, want [0 1 2 3]", seq, counts[seq])
		}
		for _, tp := range topics[seq] {
			if tp != topic {
				t.Errorf("msg %s: consumer saw topic %q", seq, tp)
			}
		}
	}
	mu.Unlock()
	retries := s.Messages("%RETRY%retryGroup")
	if len(retries) != n*failures {
		t.Fatalf("%d messages in the retry topic, want %d", len(retries), n*failures)
	}
	for _, m := range retries {
		if m.Properties["RETRY_TOPIC"] != topic || m.Properties["ORIGIN_MESSAGE_ID"] == "" || m.ReconsumeTimes < 1 ||
			m.DelayLevel != 2+m.ReconsumeTimes || !bytes.HasPrefix(m.Body, []byte("body-")) {
			t.Fatalf("retry message %+v", m)
		}
	}
}

func TestRetriesEndInDeadLetterTopic(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s)
	c := newPushConsumer(t, s, "dlqGroup", consumer.WithMaxReconsumeTimes(2))
	var mu sync.Mutex
	var seen []int32
	c.run(t, "Poison", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			seen = append(seen, m.ReconsumeTimes)
		}
		return consumer.ConsumeRetryLater, nil
	})
	if _, err := p.send(5*time.Second, primitive.NewMessage("Poison", []byte("never works"))); err != nil {
		t.Fatal(err)
	}
	dead, err := s.WaitMessages(waitCtx(t, 20*time.Second), "%DLQ%dlqGroup", 1)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[0 1 2]" || string(dead[0].Body) != "never works" || dead[0].ReconsumeTimes != 3 {
		t.Fatalf("consumed with reconsume times %v; dead letter %+v", seen, dead[0])
	}
}

func TestOrderlyConsumerGetsEachKeyInOrder(t *testing.T) {
	s := startServer(t, Options{})
	const topic = "OrderedConsume"
	p := newProducer(t, s, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	keys := []string{"A", "B", "C", "D", "E", "F"}
	const perKey = 30
	var mu sync.Mutex
	steps := map[string][]int{}
	c := newPushConsumer(t, s, "orderlyGroup", consumer.WithConsumerOrder(true))
	c.run(t, topic, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			step, _ := strconv.Atoi(m.GetProperty("step"))
			steps[m.GetShardingKey()] = append(steps[m.GetShardingKey()], step)
		}
		return consumer.ConsumeSuccess, nil
	})
	for i := 0; i < perKey; i++ {
		for _, k := range keys {
			m := primitive.NewMessage(topic, []byte(k))
			m.WithShardingKey(k)
			m.WithProperty("step", strconv.Itoa(i))
			if _, err := p.send(5*time.Second, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 20*time.Second, "every message consumed in order", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range steps {
			n += len(v)
		}
		return n >= perKey*len(keys)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		for i, step := range steps[k] {
			if step != i {
				t.Fatalf("key %s: steps %v", k, steps[k])
			}
		}
	}
}
