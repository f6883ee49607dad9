// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// testMessage builds message i of a test run with a body that exercises binary,
// UTF-8 and (every 97th message, above the client's 4 KiB threshold) compressed bodies.
func testMessage(topic string, i int) (*primitive.Message, []byte) {
	var body []byte
	switch i % 4 {
	case 0:
		body = []byte(fmt.Sprintf("plain body %d", i))
	case 1:
		body = []byte(fmt.Sprintf("订单 %d — ünïcödé ✓ 🚀", i))
	case 2:
		r := rand.New(rand.NewPCG(uint64(i), 7))
		body = make([]byte, 1+r.IntN(300))
		for j := range body {
			body[j] = byte(r.UintN(256)) // any byte, including 0, 1, 2
		}
	case 3:
		body = []byte{}
		body = append(body, 0, 1, 2, 0xff, '\n')
		body = strconv.AppendInt(body, int64(i), 10)
	}
	if i%97 == 0 {
		body = bytes.Repeat(append(body, 'x'), 8192/(len(body)+1)+1)
	}
	m := primitive.NewMessage(topic, body)
	m.WithTag(fmt.Sprintf("tag%d", i%3))
	m.WithKeys([]string{fmt.Sprintf("order-%d", i), fmt.Sprintf("k%d", i)})
	m.WithProperty("seq", strconv.Itoa(i))
	m.WithProperty("trace", fmt.Sprintf("trace-%d-ünï", i))
	return m, body
}

func TestSendSingleAndBatchStoresEverythingByteIdentical(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s)
	const topic = "OrderEvents"
	const total = 10000
	const single = 2000 // the rest go in batches of 50

	want := make(map[string][]byte, total)
	for i := 0; i < single; i++ {
		m, body := testMessage(topic, i)
		want[strconv.Itoa(i)] = body
		res, err := p.send(5*time.Second, m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if res.Status != primitive.SendOK || res.OffsetMsgID == "" || res.MsgID == "" {
			t.Fatalf("send %d: result %+v", i, res)
		}
	}
	for i := single; i < total; i += 50 {
		batch := make([]*primitive.Message, 0, 50)
		for j := i; j < i+50; j++ {
			m, body := testMessage(topic, j)
			want[strconv.Itoa(j)] = body
			batch = append(batch, m)
		}
		res, err := p.send(5*time.Second, batch...)
		if err != nil {
			t.Fatalf("batch at %d: %v", i, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("batch at %d: status %v", i, res.Status)
		}
	}

	got, err := s.WaitMessages(waitCtx(t, 10*time.Second), topic, total)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != total {
		t.Fatalf("stored %d messages, want %d", len(got), total)
	}
	seen := map[string]bool{}
	for _, m := range got {
		seq := m.Properties["seq"]
		i, _ := strconv.Atoi(seq)
		if seen[seq] {
			t.Fatalf("message %s stored twice", seq)
		}
		seen[seq] = true
		if m.Topic != topic {
			t.Errorf("msg %s: topic %q", seq, m.Topic)
		}
		if m.Tags != fmt.Sprintf("tag%d", i%3) {
			t.Errorf("msg %s: tags %q", seq, m.Tags)
		}
		if len(m.Keys) != 2 || m.Keys[0] != "order-"+seq || m.Keys[1] != "k"+seq {
			t.Errorf("msg %s: keys %q", seq, m.Keys)
		}
		if !bytes.Equal(m.Body, want[seq]) {
			t.Errorf("msg %s: body differs (%d bytes, want %d)", seq, len(m.Body), len(want[seq]))
		}
		up := m.UserProperties()
		if len(up) != 2 || up["seq"] != seq || up["trace"] != fmt.Sprintf("trace-%d-ünï", i) {
			t.Errorf("msg %s: user properties %v", seq, up)
		}
		if i < single && m.MsgID == m.OffsetMsgID {
			t.Errorf("msg %s: single send without client UNIQ_KEY", seq)
		}
		if i < single && i%97 == 0 && m.SysFlag&sysFlagCompressed == 0 {
			t.Errorf("msg %s: large body not compressed by the client", seq)
		}
	}
	// Offsets are dense per queue.
	for q := 0; q < 4; q++ {
		for i, m := range s.QueueMessages(topic, q) {
			if m.QueueID != q || m.QueueOffset != int64(i) {
				t.Fatalf("queue %d entry %d: queue %d offset %d", q, i, m.QueueID, m.QueueOffset)
			}
		}
	}
	if n := s.Count(topic); n != total {
		t.Fatalf("Count = %d, want %d", n, total)
	}
}

func TestOrderedSendsLandOnChosenQueueInOrder(t *testing.T) {
	s := startServer(t, Options{Queues: 8})
	const topic = "Ordered"
	p := newProducer(t, s, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	keys := []string{"order-A", "order-B", "order-C", "order-D", "order-E"}
	const perKey = 200
	for i := 0; i < perKey; i++ {
		for _, k := range keys {
			m := primitive.NewMessage(topic, []byte(fmt.Sprintf("%s/%d", k, i)))
			m.WithShardingKey(k)
			m.WithProperty("step", strconv.Itoa(i))
			if _, err := p.send(5*time.Second, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	queueOf := map[string]int{}
	next := map[string]int{}
	for _, m := range s.Messages(topic) {
		k := m.Properties["SHARDING_KEY"]
		if q, ok := queueOf[k]; ok && q != m.QueueID {
			t.Fatalf("key %s on queues %d and %d", k, q, m.QueueID)
		}
		queueOf[k] = m.QueueID
		if step, _ := strconv.Atoi(m.Properties["step"]); step != next[k] {
			t.Fatalf("key %s: step %d stored when %d expected", k, step, next[k])
		}
		next[k]++
	}
	for _, k := range keys {
		if next[k] != perKey {
			t.Fatalf("key %s: %d stored, want %d", k, next[k], perKey)
		}
	}

	// A manual selector: every message names its queue.
	pm := newProducer(t, s, producer.WithQueueSelector(producer.NewManualQueueSelector()))
	for i := 0; i < 40; i++ {
		m := primitive.NewMessage("Manual", []byte(strconv.Itoa(i)))
		m.Queue = &primitive.MessageQueue{Topic: "Manual", BrokerName: "broker-a", QueueId: 5}
		if _, err := pm.send(5*time.Second, m); err != nil {
			t.Fatal(err)
		}
	}
	got := s.QueueMessages("Manual", 5)
	if len(got) != 40 || s.Count("Manual") != 40 {
		t.Fatalf("queue 5 holds %d of %d messages", len(got), s.Count("Manual"))
	}
	for i, m := range got {
		if string(m.Body) != strconv.Itoa(i) {
			t.Fatalf("queue 5 entry %d is %q", i, m.Body)
		}
	}
}

func TestDelayLevelAndProducerGroupRecorded(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s, producer.WithGroupName("pg-1"))
	m := primitive.NewMessage("Delayed", []byte("later"))
	m.WithDelayTimeLevel(3)
	if _, err := p.send(5*time.Second, m); err != nil {
		t.Fatal(err)
	}
	got := s.Messages("Delayed")
	if len(got) != 1 || got[0].DelayLevel != 3 || got[0].ProducerGroup != "pg-1" {
		t.Fatalf("stored %+v", got)
	}
}
