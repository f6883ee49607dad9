// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"context"
	"fmt"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

var instanceSeq atomic.Int64

// instanceName gives every client its own name: the client library shares one
// connection set per client id (ip@instance) process-wide, so clients of different
// test servers must not share one.
func instanceName(t testing.TB) string {
	n := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	return fmt.Sprintf("%s-%d-%d", n, os.Getpid(), instanceSeq.Add(1))
}

func startServer(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	s, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func newProducer(t testing.TB, s *Server, opts ...producer.Option) *producerHandle {
	t.Helper()
	all := append([]producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.NameServerAddr()})),
		producer.WithInstanceName(instanceName(t)),
		producer.WithGroupName("test-producer"),
	}, opts...)
	p, err := producer.NewDefaultProducer(all...)
	if err != nil {
		t.Fatalf("NewDefaultProducer: %v", err)
	}
	if err := p.Start(); err != nil {
		t.Fatalf("producer Start: %v", err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return &producerHandle{p: p}
}

type sender interface {
	SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error)
}

type producerHandle struct{ p sender }

// send sends with a deadline, so that a lost answer costs at most d.
func (h *producerHandle) send(d time.Duration, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return h.p.SendSync(ctx, msgs...)
}

func newPushConsumer(t testing.TB, s *Server, group string, opts ...consumer.Option) consumerHandle {
	t.Helper()
	all := append([]consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.NameServerAddr()})),
		consumer.WithInstance(instanceName(t)),
		consumer.WithGroupName(group),
		consumer.WithConsumerModel(consumer.Clustering),
	}, opts...)
	c, err := consumer.NewPushConsumer(all...)
	if err != nil {
		t.Fatalf("NewPushConsumer: %v", err)
	}
	return consumerHandle{c: c}
}

// run subscribes fn to topic, starts the consumer and shuts it down at cleanup.
func (h consumerHandle) run(t testing.TB, topic string, fn func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)) {
	t.Helper()
	if err := h.c.Subscribe(topic, consumer.MessageSelector{}, fn); err != nil {
		t.Fatal(err)
	}
	if err := h.c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.c.Shutdown() })
}

type consumerHandle struct {
	c interface {
		Start() error
		Shutdown() error
		Subscribe(string, consumer.MessageSelector, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)) error
	}
}

// waitFor is testenv.Eventually.
var waitFor = testenv.Eventually

func waitCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
