// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// forged are messages whose fields would plant RocketMQ properties (issue 23, row 2): the
// client joins properties as name 0x01 value 0x02, unescaped.
func forged() map[string]outbox.Message {
	base := outbox.Message{Topic: "payments", Tag: "paid", Body: []byte(`{"orderSn":"SN-1001"}`)}
	with := func(f func(*outbox.Message)) outbox.Message { m := base; f(&m); return m }
	return map[string]outbox.Message{
		"msg_id":       with(func(m *outbox.Message) { m.MsgID = "idem-k1\x02KEYS\x01SN-1001" }),
		"sharding_key": with(func(m *outbox.Message) { m.ShardingKey = "user-7\x02DELAY\x0118" }),
		"msg_keys":     with(func(m *outbox.Message) { m.Keys = []string{"SN-1001\x02TAGS\x01refund"} }),
		"properties": with(func(m *outbox.Message) {
			m.Properties = map[string]string{"trace": "x\x02KEYS\x01SN-1001"}
		}),
		"tag": with(func(m *outbox.Message) { m.Tag = "paid\x02KEYS\x01SN-1001" }),
	}
}

// TestWriterRefusesFieldsThatForgeProperties: each forged field is refused with a
// *FieldError naming its column, and nothing is written.
func TestWriterRefusesFieldsThatForgeProperties(t *testing.T) {
	t.Parallel()
	db, w := setup(t)
	ctx := context.Background()
	for field, m := range forged() {
		err := w.InsertNoTx(ctx, db.DB, []outbox.Message{m})
		var fe *outbox.FieldError
		if !errors.Is(err, outbox.ErrInvalidField) || !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: Insert = %v, want a *FieldError for %s", field, err, field)
		}
	}
	// Row 11: properties over the budget (the client's 16-bit batch length wraps at 64 KiB).
	big := outbox.Message{Topic: "payments", Body: []byte("{}"), Properties: map[string]string{"blob": strings.Repeat("A", 70_000)}}
	var fe *outbox.FieldError
	if err := w.InsertNoTx(ctx, db.DB, []outbox.Message{big}); !errors.As(err, &fe) || fe.Field != "properties" {
		t.Errorf("70 KB of properties: Insert = %v, want a *FieldError for properties", err)
	}
	if n := count(t, db.DB, "1"); n != 0 {
		t.Fatalf("%d forged rows were written", n)
	}
}

func TestValidateFields(t *testing.T) {
	t.Parallel()
	ok := []outbox.Fields{
		{MsgID: "01J0ABC", Tag: "paid", Keys: []string{"SN-1001", "user-7"}, ShardingKey: "user-7"},
		{MsgID: "订单-1", Keys: []string{"订单号"}, Properties: map[string]string{"traceparent": "00-ab-cd-01", "note": "naïve ✓"}},
		{MsgID: "m", Properties: map[string]string{"big": strings.Repeat("x", outbox.MaxPropertyBytes-200)}},
	}
	for _, f := range ok {
		if err := outbox.ValidateFields(f); err != nil {
			t.Errorf("ValidateFields(%+v) = %v, want nil", f, err)
		}
	}
	tooMany := map[string]string{}
	for i := 0; i <= outbox.MaxProperties; i++ {
		tooMany[strings.Repeat("p", i+1)] = "v"
	}
	bad := map[string]outbox.Fields{
		"msg_id":       {MsgID: "a\x00b"},
		"msg_keys":     {MsgID: "m", Keys: []string{"SN\x7f"}},
		"sharding_key": {MsgID: "m", ShardingKey: "k\n"},
		"tag":          {MsgID: "m", Tag: "t\x01"},
		"properties":   {MsgID: "m", Properties: map[string]string{"n\x02": "v"}},
	}
	bad["too many properties"] = outbox.Fields{MsgID: "m", Properties: tooMany}
	// Row 11: properties over the client's 16-bit length (and the proxy's 16 KiB).
	bad["64 KiB of properties"] = outbox.Fields{MsgID: "m", Properties: map[string]string{"big": strings.Repeat("x", 70_000)}}
	bad["keys over the budget"] = outbox.Fields{MsgID: "m", Keys: []string{strings.Repeat("k", outbox.MaxPropertyBytes)}}
	for name, f := range bad {
		var fe *outbox.FieldError
		if err := outbox.ValidateFields(f); !errors.As(err, &fe) {
			t.Errorf("%s: ValidateFields = %v, want a *FieldError", name, err)
		} else if strings.ContainsAny(fe.Error(), "\x00\x01\x02\x7f\n") {
			t.Errorf("%s: the error repeats the control character: %q", name, fe.Error())
		}
	}
}
