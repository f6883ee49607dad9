// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
)

// newMsg builds a message as the push consumer hands it over: id, topic, keys and body.
func newMsg(id, body string, keys ...string) *primitive.MessageExt {
	m := &primitive.MessageExt{MsgId: id}
	m.Topic = "venue_topic"
	m.Body = []byte(body)
	if len(keys) > 0 {
		m.WithKeys(keys)
	}
	return m
}

// recorder is a handler that applies the order named by the first key and records calls.
type recorder struct {
	db    idempotency.Execer
	calls []string
	fail  map[string]error
}

func (r *recorder) handle(ctx context.Context, msg *primitive.MessageExt) error {
	sn := strings.Fields(msg.GetKeys() + " " + msg.MsgId)[0]
	r.calls = append(r.calls, sn)
	if err := r.fail[sn]; err != nil {
		return err
	}
	return applyOrder(ctx, r.db, sn)
}

type invalids struct{ got []error }

func (v *invalids) hook(err error) rocketmqmw.InvalidFunc {
	return func(_ context.Context, _ *primitive.MessageExt, reason error) error {
		v.got = append(v.got, reason)
		return err
	}
}

func TestRocketMQBatchDecidesPerMessage(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	ctx := context.Background()
	rec := &recorder{db: b.DB}
	inv := &invalids{}
	consume, err := wrap(t, g, rocketmqmw.Config{OnInvalid: inv.hook(nil), Logger: testLogger(t)}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}

	// SN-dup was consumed before; SN-busy is held by a consumer elsewhere.
	if res, err := g.Do(ctx, "venue_topic::SN-dup", func(ctx context.Context) error { return applyOrder(ctx, b.DB, "SN-dup") }); res.Outcome != idempotency.Applied || err != nil {
		t.Fatal(res, err)
	}
	if r, err := b.Store.Claim(ctx, "stock:venue_topic::SN-busy", "elsewhere", time.Minute); r != idempotency.ClaimAcquired || err != nil {
		t.Fatal(r, err)
	}
	batch := []*primitive.MessageExt{
		newMsg("m1", "", "SN-new", "other-key"),
		newMsg("m2", "", "SN-dup"),
		newMsg("m3", "", "SN-busy"),
		newMsg("m4", ""), // no key
		newMsg("m5", "", "SN-new2"),
	}

	res, err := consume(ctx, batch...)
	if res != consumer.ConsumeRetryLater || err != nil {
		t.Fatalf("batch with a message in progress: %v, %v; want RetryLater without error", res, err)
	}
	if got := strings.Join(rec.calls, ","); got != "SN-new,SN-new2" {
		t.Fatalf("handler called for %s, want SN-new,SN-new2", got)
	}
	if len(inv.got) != 1 || !errors.Is(inv.got[0], idempotency.ErrNoKey) {
		t.Fatalf("OnInvalid calls %v, want one with ErrNoKey", inv.got)
	}

	// The other consumer fails and releases; the broker redelivers the whole batch.
	if err := b.Store.Release(ctx, "stock:venue_topic::SN-busy", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	rec.calls = nil
	res, err = consume(ctx, batch...)
	if res != consumer.ConsumeSuccess || err != nil {
		t.Fatalf("redelivered batch: %v, %v; want success", res, err)
	}
	if got := strings.Join(rec.calls, ","); got != "SN-busy" {
		t.Fatalf("redelivery called the handler for %s, want SN-busy only", got)
	}
	if len(inv.got) != 2 {
		t.Fatalf("OnInvalid called %d times, want again for the redelivered keyless message", len(inv.got))
	}
	for _, sn := range []string{"SN-new", "SN-dup", "SN-busy", "SN-new2"} {
		if n := appliedCount(t, b.DB.DB, sn); n != 1 {
			t.Errorf("%s applied %d times, want 1", sn, n)
		}
	}
	assertEachAppliedOnce(t, b.DB.DB, 4)
}

func TestRocketMQHandlerFailureRetriesBatch(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	ctx := context.Background()
	boom := errors.New("warehouse unavailable")
	rec := &recorder{db: b.DB, fail: map[string]error{"SN2": boom}}
	consume, err := wrap(t, g, rocketmqmw.Config{Logger: testLogger(t)}, rec.handle)
	if err != nil {
		t.Fatal(err)
	}
	batch := []*primitive.MessageExt{newMsg("m1", "", "SN1"), newMsg("m2", "", "SN2"), newMsg("m3", "", "SN3")}
	res, err := consume(ctx, batch...)
	if res != consumer.ConsumeRetryLater || !errors.Is(err, boom) {
		t.Fatalf("batch with a failure: %v, %v; want RetryLater with the handler's error", res, err)
	}
	delete(rec.fail, "SN2")
	rec.calls = nil
	if res, err := consume(ctx, batch...); res != consumer.ConsumeSuccess || err != nil {
		t.Fatalf("redelivery: %v, %v", res, err)
	}
	if got := strings.Join(rec.calls, ","); got != "SN2" {
		t.Fatalf("redelivery called the handler for %s, want SN2 only", got)
	}
	assertEachAppliedOnce(t, b.DB.DB, 3)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if res, err := consume(cancelled, newMsg("m9", "", "SN9")); res != consumer.ConsumeRetryLater || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v, %v; want RetryLater", res, err)
	}
}

func TestRocketMQMissingKey(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{})
	ctx := context.Background()

	t.Run("default rejects, logs and acknowledges", func(t *testing.T) {
		var logs bytes.Buffer
		l := slog.New(slog.NewJSONHandler(&logs, nil))
		rec := &recorder{db: b.DB}
		consume, err := wrap(t, g, rocketmqmw.Config{Logger: l}, rec.handle)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 { // and again when redelivered: never applied
			if res, err := consume(ctx, newMsg("MSG-NOKEY", `{"orderSn":"SN1"}`)); res != consumer.ConsumeSuccess || err != nil {
				t.Fatalf("keyless message: %v, %v; want acknowledged", res, err)
			}
		}
		if len(rec.calls) != 0 {
			t.Fatalf("handler called for a keyless message: %v", rec.calls)
		}
		if !strings.Contains(logs.String(), `"msg_id":"MSG-NOKEY"`) || !strings.Contains(logs.String(), `"level":"ERROR"`) {
			t.Fatalf("operator not told: log %q", logs.String())
		}
	})

	t.Run("OnInvalid error sends it back", func(t *testing.T) {
		parkErr := errors.New("quarantine table unavailable")
		inv := &invalids{}
		rec := &recorder{db: b.DB}
		consume, err := wrap(t, g, rocketmqmw.Config{OnInvalid: inv.hook(parkErr), Logger: testLogger(t)}, rec.handle)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := consume(ctx, newMsg("m1", "")); res != consumer.ConsumeRetryLater || !errors.Is(err, parkErr) {
			t.Fatalf("%v, %v; want RetryLater with the hook's error", res, err)
		}
		if len(rec.calls) != 0 || len(inv.got) != 1 {
			t.Fatalf("handler calls %v, hook calls %v", rec.calls, inv.got)
		}
	})

	t.Run("use message id", func(t *testing.T) {
		inv := &invalids{}
		rec := &recorder{db: b.DB}
		consume, err := wrap(t, g, rocketmqmw.Config{MissingKey: rocketmqmw.MissingKeyUseMsgID, OnInvalid: inv.hook(nil), Logger: testLogger(t)}, rec.handle)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if res, err := consume(ctx, newMsg("7F0000012A2C1B2C3D4E0001", "")); res != consumer.ConsumeSuccess || err != nil {
				t.Fatalf("%v, %v", res, err)
			}
		}
		if n := appliedCount(t, b.DB.DB, "7F0000012A2C1B2C3D4E0001"); n != 1 || len(rec.calls) != 1 {
			t.Fatalf("keyed by id: applied %d times, handler called %d times; want once", n, len(rec.calls))
		}
		if res, err := consume(ctx, newMsg("", "")); res != consumer.ConsumeSuccess || err != nil || len(inv.got) != 1 {
			t.Fatalf("no key and no id: %v, %v, hook calls %d; want rejected", res, err, len(inv.got))
		}
	})

	t.Run("json field", func(t *testing.T) {
		inv := &invalids{}
		var calls []string
		consume, err := wrap(t, g, rocketmqmw.Config{Key: rocketmqmw.KeyFromJSONField("message.orderSn"), OnInvalid: inv.hook(nil), Logger: testLogger(t)},
			func(ctx context.Context, msg *primitive.MessageExt) error {
				calls = append(calls, msg.MsgId)
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		res, err := consume(ctx,
			newMsg("j1", `{"message":{"orderSn":"JSN-1","timePeriodId":7},"uuid":"u1"}`),
			newMsg("j2", `{"message":{"orderSn":"JSN-1","timePeriodId":7},"uuid":"u2"}`), // same order, other message
			newMsg("j3", `{"message":{"orderSn":""}}`),
			newMsg("j4", `not json`),
		)
		if res != consumer.ConsumeSuccess || err != nil {
			t.Fatalf("%v, %v", res, err)
		}
		if strings.Join(calls, ",") != "j1" || len(inv.got) != 2 {
			t.Fatalf("handler calls %v, rejected %d; want j1 applied, j3 and j4 rejected", calls, len(inv.got))
		}
	})
}

func TestRocketMQTx(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	ctx := context.Background()
	inv := &invalids{}
	var calls []string
	consume, err := wrapTx(t, b.Guard, b.DB, rocketmqmw.Config{OnInvalid: inv.hook(nil), Logger: testLogger(t)},
		func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
			sn := strings.Fields(msg.GetKeys())[0]
			if len(sn) > 32 {
				sn = "LONG"
			}
			calls = append(calls, sn)
			return applyOrder(ctx, tx, sn)
		})
	if err != nil {
		t.Fatal(err)
	}
	batch := []*primitive.MessageExt{
		newMsg("m1", "", "SN1"),
		newMsg("m2", "", "SN1"), // the same order twice in one batch
		newMsg("m3", "", "SN2"),
		newMsg("m4", "", strings.Repeat("9", idempotency.MaxSQLKeyLen+1)),   // identity hashed to fit
		newMsg("m5", "", strings.Repeat("9", idempotency.MaxSQLKeyLen)+"8"), // another event
	}
	for i := range 2 {
		if res, err := consume(ctx, batch...); res != consumer.ConsumeSuccess || err != nil {
			t.Fatalf("delivery %d: %v, %v", i+1, res, err)
		}
	}
	if strings.Join(calls, ",") != "SN1,SN2,LONG,LONG" {
		t.Fatalf("handler calls %v, want SN1,SN2 and each long key once", calls)
	}
	if len(inv.got) != 0 {
		t.Fatalf("OnInvalid calls %v, want none", inv.got)
	}
	if n := appliedCount(t, b.DB.DB, "LONG"); n != 2 {
		t.Fatalf("two events with long keys applied %d times in all, want 2", n)
	}
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	withProp := newMsg("id", "")
	withProp.WithProperty("orderSn", "P-1")
	for _, tc := range []struct {
		name string
		fn   rocketmqmw.KeyFunc
		msg  *primitive.MessageExt
		want string // "" means ErrNoKey
	}{
		{"all keys", rocketmqmw.KeyFromKeys(), newMsg("id", "", "K1", "K2"), "K1 K2"},
		{"no keys", rocketmqmw.KeyFromKeys(), newMsg("id", ""), ""},
		{"property", rocketmqmw.KeyFromProperty("orderSn"), withProp, "P-1"},
		{"missing property", rocketmqmw.KeyFromProperty("other"), withProp, ""},
		{"json string", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", `{"orderSn":"J-1"}`), "J-1"},
		{"json big number", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", `{"orderSn":12345678901234567890}`), "12345678901234567890"},
		{"json nested", rocketmqmw.KeyFromJSONField("message.orderSn"), newMsg("id", `{"message":{"orderSn":"J-2"}}`), "J-2"},
		{"json null", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", `{"orderSn":null}`), ""},
		{"json object", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", `{"orderSn":{"a":1}}`), ""},
		{"json missing", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", `{"order":"x"}`), ""},
		{"json path through a string", rocketmqmw.KeyFromJSONField("message.orderSn"), newMsg("id", `{"message":"x"}`), ""},
		{"not json", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", `orderSn=1`), ""},
		{"empty body", rocketmqmw.KeyFromJSONField("orderSn"), newMsg("id", ``), ""},
	} {
		got, err := tc.fn(tc.msg)
		if tc.want == "" {
			if !errors.Is(err, idempotency.ErrNoKey) {
				t.Errorf("%s: %q, %v; want ErrNoKey", tc.name, got, err)
			}
			continue
		}
		if got != tc.want || err != nil {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

// A handler that outlives its claim has applied the effect: the middleware acknowledges
// the message (a retry could apply it again) and reports the lost claim at error level.
func TestRocketMQAppliedButClaimLostIsAcknowledged(t *testing.T) {
	t.Parallel()
	b := setupRedis(t)
	g := b.Guard(t, idempotency.Config{ClaimTTL: 200 * time.Millisecond})
	var logs bytes.Buffer
	l := slog.New(slog.NewJSONHandler(&logs, nil))
	consume, err := wrap(t, g, rocketmqmw.Config{Logger: l}, func(ctx context.Context, msg *primitive.MessageExt) error {
		waitFor(t, "the claim to expire", func() bool { return b.Value(t, "stock", "venue_topic::SN-slow") == "" })
		return applyOrder(ctx, b.DB, "SN-slow")
	})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := consume(context.Background(), newMsg("m1", "", "SN-slow")); res != consumer.ConsumeSuccess || err != nil {
		t.Fatalf("%v, %v; want acknowledged", res, err)
	}
	if !strings.Contains(logs.String(), "claim lost") || !strings.Contains(logs.String(), `"level":"ERROR"`) {
		t.Fatalf("lost claim not reported: %q", logs.String())
	}
	if n := appliedCount(t, b.DB.DB, "SN-slow"); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
}
