// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// Each attempt of the client waits up to producer.WithSendMsgTimeout (3 s by default;
// v2.1.2 ignored the option) or the context's deadline. So fault tests bound every send
// with a short context deadline and turn the client's own retries off where they would
// blur the count.

func TestErrorRateOneFailsEverySendAndStoresNothing(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s) // default: 2 retries, all answered with the error too
	s.SetFaults(Faults{ErrorRate: 1})
	for i := 0; i < 20; i++ {
		_, err := p.send(2*time.Second, primitive.NewMessage("Err", []byte("x")))
		if err == nil || !strings.Contains(err.Error(), "CODE: 1") {
			t.Fatalf("send %d: err = %v, want a broker error with code 1", i, err)
		}
	}
	batch := []*primitive.Message{primitive.NewMessage("Err", []byte("a")), primitive.NewMessage("Err", []byte("b"))}
	if _, err := p.send(2*time.Second, batch...); err == nil {
		t.Fatal("batch send succeeded under ErrorRate 1")
	}
	if n := s.Count("Err"); n != 0 {
		t.Fatalf("%d messages stored under ErrorRate 1", n)
	}

	s.SetFaults(Faults{ErrorRate: 1, ErrorCode: 2}) // SYSTEM_BUSY: not retried by the client
	if _, err := p.send(2*time.Second, primitive.NewMessage("Err", []byte("x"))); err == nil || !strings.Contains(err.Error(), "CODE: 2") {
		t.Fatalf("err = %v, want a broker error with code 2", err)
	}

	s.ClearFaults()
	if _, err := p.send(2*time.Second, primitive.NewMessage("Err", []byte("ok"))); err != nil {
		t.Fatalf("send after ClearFaults: %v", err)
	}
	if got := s.Messages("Err"); len(got) != 1 || string(got[0].Body) != "ok" {
		t.Fatalf("stored %+v", got)
	}
}

func TestErrorRateFractionStoresExactlyTheAcknowledgedSends(t *testing.T) {
	s := startServer(t, Options{RandSource: rand.NewPCG(42, 42)})
	p := newProducer(t, s, producer.WithRetry(0))
	s.SetFaults(Faults{ErrorRate: 0.3})
	acked := map[string]bool{}
	failed := 0
	for i := 0; i < 300; i++ {
		m := primitive.NewMessage("Half", []byte(strconv.Itoa(i)))
		if _, err := p.send(2*time.Second, m); err != nil {
			failed++
			continue
		}
		acked[strconv.Itoa(i)] = true
	}
	if failed == 0 || len(acked) == 0 {
		t.Fatalf("failed %d, acked %d: a 0.3 error rate should give both", failed, len(acked))
	}
	stored := s.Messages("Half")
	if len(stored) != len(acked) {
		t.Fatalf("stored %d, acknowledged %d", len(stored), len(acked))
	}
	for _, m := range stored {
		if !acked[string(m.Body)] {
			t.Fatalf("message %s stored but its send failed", m.Body)
		}
	}
}

func TestTopicFaultsOverrideGlobalOnes(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s, producer.WithRetry(0))
	s.SetTopicFaults("Broken", Faults{ErrorRate: 1})
	if _, err := p.send(2*time.Second, primitive.NewMessage("Broken", []byte("x"))); err == nil {
		t.Fatal("send to the faulty topic succeeded")
	}
	if _, err := p.send(2*time.Second, primitive.NewMessage("Fine", []byte("x"))); err != nil {
		t.Fatalf("send to a healthy topic: %v", err)
	}
	s.SetFaults(Faults{ErrorRate: 1})
	s.SetTopicFaults("Fine", Faults{})
	if _, err := p.send(2*time.Second, primitive.NewMessage("Fine", []byte("y"))); err != nil {
		t.Fatalf("topic without faults under global faults: %v", err)
	}
	if _, err := p.send(2*time.Second, primitive.NewMessage("Other", []byte("x"))); err == nil {
		t.Fatal("global faults not applied to another topic")
	}
	if s.Count("Broken") != 0 || s.Count("Fine") != 2 || s.Count("Other") != 0 {
		t.Fatalf("counts Broken=%d Fine=%d Other=%d", s.Count("Broken"), s.Count("Fine"), s.Count("Other"))
	}
}

func TestDropBeforeStoreLosesTheSendAndStoresNothing(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s, producer.WithRetry(0))
	if _, err := p.send(2*time.Second, primitive.NewMessage("Drop", []byte("warm-up"))); err != nil {
		t.Fatal(err)
	}
	s.SetFaults(Faults{DropBeforeStore: 1})
	if _, err := p.send(500*time.Millisecond, primitive.NewMessage("Drop", []byte("lost"))); err == nil {
		t.Fatal("send succeeded although the broker dropped the connection")
	}
	if got := s.Messages("Drop"); len(got) != 1 || string(got[0].Body) != "warm-up" {
		t.Fatalf("stored %d messages, want only the warm-up", len(got))
	}
	s.ClearFaults()
	if _, err := p.send(2*time.Second, primitive.NewMessage("Drop", []byte("again"))); err != nil {
		t.Fatalf("send after the drop (the client must reconnect): %v", err)
	}
	if n := s.Count("Drop"); n != 2 {
		t.Fatalf("stored %d, want 2", n)
	}
}

func TestDropAfterStoreLosesTheAckSoARetryDuplicates(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s, producer.WithRetry(0))
	s.SetFaults(Faults{DropAfterStore: 1})
	m := primitive.NewMessage("LostAck", []byte("pay order 42"))
	m.WithKeys([]string{"order-42"})
	if _, err := p.send(500*time.Millisecond, m); err == nil {
		t.Fatal("send reported success although the ack was lost")
	}
	got, err := s.WaitMessages(waitCtx(t, 5*time.Second), "LostAck", 1)
	if err != nil || len(got) != 1 {
		t.Fatalf("stored %d (%v), want exactly 1", len(got), err)
	}

	// The client (the relay, say) retries the same message: the broker now holds it twice.
	s.ClearFaults()
	res, err := p.send(2*time.Second, m)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	got = s.Messages("LostAck")
	if len(got) != 2 {
		t.Fatalf("stored %d after the retry, want 2 (a duplicate)", len(got))
	}
	if got[0].MsgID != got[1].MsgID || got[1].MsgID != res.MsgID || got[0].Keys[0] != "order-42" || got[1].Keys[0] != "order-42" {
		t.Fatalf("duplicates should share msg id and keys: %+v / %+v (send result %s)", got[0], got[1], res.MsgID)
	}
	if got[0].OffsetMsgID == got[1].OffsetMsgID {
		t.Fatal("two stored copies share a broker offset id")
	}
}

func TestLatencyDelaysButStores(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s, producer.WithRetry(0))
	s.SetFaults(Faults{Latency: 200 * time.Millisecond})
	if _, err := p.send(5*time.Second, primitive.NewMessage("Slow", []byte("patient"))); err != nil {
		t.Fatalf("send under latency within the deadline: %v", err)
	}
	// A client that gives up before the slow broker answers still gets its message stored:
	// a timeout is not a failure to deliver.
	s.SetFaults(Faults{Latency: time.Second})
	if _, err := p.send(100*time.Millisecond, primitive.NewMessage("Slow", []byte("impatient"))); err == nil {
		t.Fatal("send returned before the broker answered")
	}
	got, err := s.WaitMessages(waitCtx(t, 5*time.Second), "Slow", 2)
	if err != nil {
		t.Fatal(err)
	}
	if string(got[0].Body) != "patient" || string(got[1].Body) != "impatient" {
		t.Fatalf("stored %q, %q", got[0].Body, got[1].Body)
	}
}

func TestBrokerOutageAndRecovery(t *testing.T) {
	s := startServer(t, Options{})
	p := newProducer(t, s)
	addr := s.BrokerAddr()

	var mu sync.Mutex
	var bodies []string
	c := newPushConsumer(t, s, "outageGroup")
	c.run(t, "Outage", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			bodies = append(bodies, string(m.Body))
		}
		return consumer.ConsumeSuccess, nil
	})
	consumed := func(n int) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) >= n }
	}

	for i := 0; i < 3; i++ {
		if _, err := p.send(2*time.Second, primitive.NewMessage("Outage", []byte("before-"+strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the messages sent before the outage to be consumed", consumed(3))

	s.StopBroker()
	s.StopBroker() // twice is harmless
	if s.BrokerRunning() {
		t.Fatal("broker still running")
	}
	if _, err := p.send(time.Second, primitive.NewMessage("Outage", []byte("during"))); err == nil {
		t.Fatal("send succeeded while the broker was down")
	}

	if err := s.StartBroker(); err != nil {
		t.Fatal(err)
	}
	if s.BrokerAddr() != addr {
		t.Fatalf("broker came back on %s, was %s", s.BrokerAddr(), addr)
	}
	if _, err := p.send(2*time.Second, primitive.NewMessage("Outage", []byte("after"))); err != nil {
		t.Fatalf("send after the broker came back: %v", err)
	}
	got := s.Messages("Outage")
	if len(got) != 4 || string(got[0].Body) != "before-0" || string(got[3].Body) != "after" {
		t.Fatalf("stored %d messages after the outage, want the 3 old ones and the new one", len(got))
	}
	waitFor(t, 60*time.Second, "the consumer to resume after the outage", consumed(4))
	mu.Lock()
	defer mu.Unlock()
	if bodies[len(bodies)-1] != "after" {
		t.Fatalf("consumed %v", bodies)
	}
}

func TestCloseIsIdempotentAndUnknownCodesAreAnswered(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	s, err := Start(Options{Logf: func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, f)
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := 0; i < 2; i++ {
		resp := rawRequest(t, s.BrokerAddr(), &command{Code: 9999, Opaque: int32(i + 1), Ext: map[string]string{}})
		if resp.Code != resRequestCodeNotSupported || resp.Opaque != int32(i+1) || !resp.IsResponse() {
			t.Fatalf("response %+v", resp)
		}
	}
	resp := rawRequest(t, s.NameServerAddr(), &command{Code: 9998, Opaque: 7, Ext: map[string]string{}, Serialization: frame.RocketMQ})
	if resp.Code != resRequestCodeNotSupported || resp.Opaque != 7 {
		t.Fatalf("binary-codec response %+v", resp)
	}
	mu.Lock()
	if len(logged) != 2 {
		t.Errorf("logged %d lines, want one per unknown code", len(logged))
	}
	mu.Unlock()
	s.Close()
	s.Close()
	if err := s.StartBroker(); err == nil {
		t.Fatal("StartBroker after Close succeeded")
	}
}

// A lost ack reaches a consumer as a duplicate; a consumer sharing the producer's
// connection (same client instance) keeps consuming through the dropped connection.
func TestDropAfterStoreDuplicateReachesConsumerSharingTheConnection(t *testing.T) {
	s := startServer(t, Options{})
	name := instanceName(t)
	p := newProducer(t, s, producer.WithRetry(0), producer.WithInstanceName(name))
	var mu sync.Mutex
	var ids []string
	c := newPushConsumer(t, s, "dupGroup", consumer.WithInstance(name))
	c.run(t, "Dup", func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			ids = append(ids, m.MsgId)
		}
		return consumer.ConsumeSuccess, nil
	})
	waitFor(t, 10*time.Second, "the consumer to register", func() bool { return len(s.Consumers("dupGroup")) == 1 })

	s.SetFaults(Faults{DropAfterStore: 1})
	m := primitive.NewMessage("Dup", []byte("once, please"))
	if _, err := p.send(500*time.Millisecond, m); err == nil {
		t.Fatal("send succeeded although the ack was lost")
	}
	s.ClearFaults()
	res, err := p.send(2*time.Second, m)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "both copies to be consumed", func() bool { mu.Lock(); defer mu.Unlock(); return len(ids) == 2 })
	mu.Lock()
	defer mu.Unlock()
	if ids[0] != res.MsgID || ids[1] != res.MsgID {
		t.Fatalf("consumed ids %v, want twice %s", ids, res.MsgID)
	}
}
