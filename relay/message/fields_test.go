// SPDX-License-Identifier: Apache-2.0

package message

import (
	"strings"
	"testing"
)

// FromRow, the check the relay and the replay share: a well-formed row becomes its message,
// keys split on spaces; a body over the limit, properties that are not a JSON object of
// strings, and a field carrying a property separator are refused with the reason.
func TestFromRowChecksAsTheRelayDoes(t *testing.T) {
	t.Parallel()
	good := Row{ID: 7, MsgID: "m-7", Topic: "orders", Tag: "paid", Keys: "SN-1001  cust-9", ShardingKey: "cust-9",
		Props: `{"trace":"abc"}`, Body: []byte("{}"), BodyLen: 2}
	m, err := FromRow(good, 10)
	if err != nil || m.ID != 7 || m.MsgID != "m-7" || strings.Join(m.Keys, ",") != "SN-1001,cust-9" || m.Properties["trace"] != "abc" || string(m.Body) != "{}" {
		t.Fatalf("a good row: %+v, %v", m, err)
	}
	cases := map[string]struct {
		edit func(*Row)
		want string
	}{
		"body over the limit":  {func(r *Row) { r.BodyLen = 11 }, "over the limit of 10"},
		"malformed properties": {func(r *Row) { r.Props = `["x"]` }, "malformed properties"},
		"forged key":           {func(r *Row) { r.Keys = "SN-1001\x01FAKE\x02x" }, "key"},
	}
	for name, c := range cases {
		r := good
		c.edit(&r)
		if m, err := FromRow(r, 10); err == nil || m != nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %+v, %v; want an error with %q", name, m, err, c.want)
		}
	}
}
