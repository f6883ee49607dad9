// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
)

// syncBuffer is a log sink for concurrent consumers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A distinct "paid" event of one order keyed by the order number alone (as msg_keys usually
// is) has the identity of the first and is skipped. It is not silent, with a Redis guard and
// with SQLGuard alike: it is logged at warn level (its body differs from the first
// delivery's) and counted with same_body="false", while a plain redelivery is counted with
// same_body="true" and logged at debug level only.
func TestDistinctEventSkippedAsDuplicateIsReported(t *testing.T) {
	onEachBroker(t, func(t *testing.T, b broker) {
		for _, store := range []string{"redis", "sql"} {
			t.Run(store, func(t *testing.T) { distinctEventReported(t, b, store) })
		}
	})
}

func distinctEventReported(t *testing.T, b broker, store string) {
	topic := b.newTopic(t)
	paid := func(body string) *primitive.Message {
		m := primitive.NewMessage(topic, []byte(body))
		m.WithTag("paid")
		m.WithKeys([]string{"SN-7"})
		m.WithShardingKey("one-queue")
		return m
	}
	first := `{"orderSn":"SN-7","payment":1}`
	send(t, b.nameSrv, paid(first), paid(first), paid(`{"orderSn":"SN-7","payment":2}`))

	var logs syncBuffer
	reg := prometheus.NewRegistry()
	var handled atomic.Int64
	cfg := rocketmqmw.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Registerer: reg}
	var mw *rocketmqmw.Middleware
	var err error
	group := "billing"
	if store == "redis" {
		s := setupRedis(t)
		mw, err = rocketmqmw.New(s.Guard(t, idempotency.Config{Group: "billing"}), cfg,
			func(context.Context, *primitive.MessageExt) error { handled.Add(1); return nil })
	} else {
		s := setupSQL(t) // SQLGuard with its defaults
		group = s.Guard.Group()
		mw, err = rocketmqmw.NewTx(s.Guard, s.DB, cfg,
			func(context.Context, *sql.Tx, *primitive.MessageExt) error { handled.Add(1); return nil })
	}
	if err != nil {
		t.Fatal(err)
	}
	var delivered atomic.Int64
	consume(t, b, "billing", topic, mw, &delivered, consumer.WithConsumerOrder(true)) // first applied is the first sent
	waitFor(t, "three deliveries", func() bool { return delivered.Load() == 3 })

	if handled.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", handled.Load())
	}
	dups := func(same string) float64 {
		return counted(t, reg, group, topic, "paid", same)
	}
	if dups("true") != 1 || dups("false") != 1 {
		t.Errorf("duplicates counted: same body %v, different body %v; want 1 and 1", dups("true"), dups("false"))
	}
	out := logs.String()
	var warn, debug int
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "level=WARN") && strings.Contains(line, "body differs") && strings.Contains(line, "SN-7"):
			warn++
		case strings.Contains(line, "level=DEBUG") && strings.Contains(line, "duplicate skipped"):
			debug++
		}
	}
	if warn != 1 || debug != 1 {
		t.Errorf("%d warn and %d debug lines about duplicates, want 1 and 1:\n%s", warn, debug, out)
	}
}

// counted returns the value of the duplicates counter of the labels, registered in reg.
func counted(t *testing.T, reg *prometheus.Registry, group, topic, tag, same string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "outbox_consumer_duplicates_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["group"] == group && labels["topic"] == topic && labels["tag"] == tag && labels["same_body"] == same {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}
