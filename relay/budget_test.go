// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// bodyGauge passes sends on to the real publisher and records the most body bytes that were
// in sends running at once.
type bodyGauge struct {
	relay.Publisher
	mu       sync.Mutex
	now, top int
}

func (g *bodyGauge) Send(ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
	n := 0
	for _, m := range msgs {
		n += len(m.Body)
	}
	g.mu.Lock()
	g.now += n
	g.top = max(g.top, g.now)
	g.mu.Unlock()
	defer func() { g.mu.Lock(); g.now -= n; g.mu.Unlock() }()
	return g.Publisher.Send(ctx, route, msgs...)
}

// TestMemoryBudgetBoundsBodiesInFlight: with a memory budget of 512 KiB and a slow broker,
// 39 bodies of 256 KiB and one of 2 MiB (larger than the whole budget) are all delivered,
// each once, the ordered key's rows in id order, while the bodies in sends at once never
// exceed the budget by more than one body (without the budget: 16 sends of 4 MiB). The budget holds back reading, nothing else, and never wedges on a body
// larger than itself.
func TestMemoryBudgetBoundsBodiesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const limit, small, large, rows = 512 << 10, 256 << 10, 2 << 20, 40
	var msgs []outbox.Message
	for i := 0; i < rows; i++ {
		size := small
		if i == 12 {
			size = large
		}
		body := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		copy(body, fmt.Sprintf("%03d", i))
		m := outbox.Message{MsgID: fmt.Sprintf("big-%03d", i), Topic: "bodies", Body: body}
		if i%5 == 0 {
			m.Topic, m.ShardingKey = "ordered-bodies", "one-key"
		}
		msgs = append(msgs, m)
	}
	b.insert(t, msgs...)
	router, err := relay.NewPatternRouter(relay.PatternRule{Topic: "ordered-bodies", Route: relay.Route{Ordered: true}})
	if err != nil {
		t.Fatal(err)
	}
	gauge := &bodyGauge{Publisher: b.pub}
	cfg := b.config()
	cfg.Router, cfg.MemoryBudget, cfg.DisableBatchSend = router, relay.NewMemoryBudget(limit), true
	b.broker.SetFaults(rmqtest.Faults{Latency: 20 * time.Millisecond})
	r, err := relay.New(b.db.DB, b.rdb, gauge, cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, r)
	testenv.Eventually(t, 60*time.Second, "every row sent", func() bool { return countWhere(t, b.db.DB, "status = 2") == rows })
	if n := b.broker.Count("bodies") + b.broker.Count("ordered-bodies"); n != rows {
		t.Errorf("the broker holds %d messages, want %d (each row once)", n, rows)
	}
	var last string
	for _, m := range b.broker.Messages("ordered-bodies") {
		if seq := string(m.Body[:3]); seq < last {
			t.Errorf("ordered key delivered %s after %s", seq, last)
		} else {
			last = seq
		}
	}
	gauge.mu.Lock()
	top := gauge.top
	gauge.mu.Unlock()
	t.Logf("most body bytes in sends at once: %d KiB (budget %d KiB)", top>>10, limit>>10)
	if top > limit+large {
		t.Errorf("%d KiB of bodies were in sends at once, over the budget (%d KiB) plus one body", top>>10, limit>>10)
	}
	testenv.Eventually(t, 10*time.Second, "the budget released", func() bool { return cfg.MemoryBudget.Used() == 0 })
}
