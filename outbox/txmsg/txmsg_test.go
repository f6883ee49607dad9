// SPDX-License-Identifier: Apache-2.0

package txmsg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

var seq atomic.Int64

type fixture struct {
	ctx    context.Context
	db     *testenv.DB
	broker *rmqtest.Server
	p      *Producer
}

func setup(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	db := testenv.MySQL(t)
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	prod, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{broker.NameServerAddr()})),
		producer.WithInstanceName(fmt.Sprintf("txmsg-%d-%d", os.Getpid(), seq.Add(1))),
		producer.WithGroupName("writer"), producer.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := prod.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prod.Shutdown() })
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Writer: w, Sender: prod, NameServers: []string{broker.NameServerAddr()}, CheckGroup: "tx", Secret: "txmsg-test-secret-0123", Grace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &fixture{ctx: ctx, db: db, broker: broker, p: p}
}

func (f *fixture) row(t *testing.T, id string) (status int, next int64) {
	t.Helper()
	if err := f.db.QueryRowContext(f.ctx, "SELECT status, next_retry_time FROM local_message WHERE msg_id = ?", id).Scan(&status, &next); err != nil {
		t.Fatal(err)
	}
	return status, next
}

// prepare runs Prepare in a new transaction and commits it.
func (f *fixture) prepareCommit(t *testing.T, m *outbox.Message) *Half {
	t.Helper()
	tx, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.p.Prepare(f.ctx, tx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return h
}

// An ordered message (sharding key) and a delayed one stay ordinary rows: no half, the
// relay's row as the plain writer makes it.
func TestOrderedAndDelayedStayOrdinary(t *testing.T) {
	f := setup(t)
	for _, m := range []*outbox.Message{
		{Topic: "T", Body: []byte("o"), ShardingKey: "order-1"},
		{Topic: "T", Body: []byte("d"), DeliverAt: time.Now().Add(time.Minute)},
	} {
		h := f.prepareCommit(t, m)
		if !h.Relayed() || len(f.broker.Halves()) != 0 {
			t.Fatalf("%+v: a half was sent", m)
		}
		if err := f.p.Finish(f.ctx, f.db.DB, h, nil); err != nil {
			t.Fatal(err)
		}
		if st, _ := f.row(t, h.MsgID()); st != 0 {
			t.Fatalf("row status %d, want 0 (the relay's)", st)
		}
	}
}

// A failed half send hands the row to the relay at once (next_retry_time 0) instead of
// after the grace period.
func TestHalfSendFailedLeavesTheRowDue(t *testing.T) {
	f := setup(t)
	f.broker.SetFaults(rmqtest.Faults{ErrorRate: 1, ErrorCode: 2})
	h := f.prepareCommit(t, &outbox.Message{Topic: "T", Body: []byte("x")})
	if !h.Relayed() {
		t.Fatal("Prepare reported a half sent")
	}
	if st, next := f.row(t, h.MsgID()); st != 0 || next != 0 {
		t.Fatalf("row status %d next_retry_time %d, want 0 and 0", st, next)
	}
}

// A half ended after half the grace period is rolled back and the row handed to the
// relay (due now), so that the writer and the relay never both deliver it; a failed
// commit rolls the half back.
func TestStaleHalfAndFailedCommitRollBack(t *testing.T) {
	f := setup(t)
	h := f.prepareCommit(t, &outbox.Message{Topic: "T", Body: []byte("stale")})
	start := time.Now()
	f.p.now = func() time.Time { return start.Add(6 * time.Second) }
	if err := f.p.Finish(f.ctx, f.db.DB, h, nil); !errors.Is(err, ErrLeftToRelay) {
		t.Fatalf("Finish of a stale half = %v, want ErrLeftToRelay", err)
	}
	f.p.now = time.Now
	if hs, _ := f.broker.Half(h.MsgID()); hs.Resolution != rmqtest.RolledBack {
		t.Fatalf("stale half %+v, want rolled back", hs)
	}
	if st, next := f.row(t, h.MsgID()); st != 0 || next != 0 {
		t.Fatalf("stale row status %d next_retry_time %d, want 0 and 0 (the relay's, now)", st, next)
	}
	h2 := f.prepareCommit(t, &outbox.Message{Topic: "T", Body: []byte("failed-commit")})
	if err := f.p.Finish(f.ctx, f.db.DB, h2, errors.New("commit failed")); err != nil {
		t.Fatal(err)
	}
	if hs, _ := f.broker.Half(h2.MsgID()); hs.Resolution != rmqtest.RolledBack || f.broker.Count("T") != 0 {
		t.Fatalf("half after a failed commit %+v, %d visible; want rolled back, none", hs, f.broker.Count("T"))
	}
}
