// SPDX-License-Identifier: Apache-2.0

package storedlog

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func samplePositions() []Pos {
	return []Pos{
		{ID: 1001, Broker: "broker-a", QueueID: 3, Offset: 77, CommitOffset: 123456},
		{ID: 1000, Broker: "broker-b", QueueID: 0, Offset: 0, CommitOffset: -1},
		{ID: 1005, Broker: "broker-a", QueueID: 15, Offset: math.MaxInt64, CommitOffset: math.MaxInt64 - 1},
	}
}

func TestRoundTrip(t *testing.T) {
	ps := samplePositions()
	b, err := Encode(ps)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ps) {
		t.Fatalf("decoded %+v, want %+v", got, ps)
	}
}

// TestEntryIsCompact: a page of 500 rows on one broker's 8 queues, as a write-back records
// them (consecutive offsets per queue, commit log offsets a message apart), takes at most 7
// bytes a row: the differences, not the offsets (the columns the journal replaced took 76
// bytes a row; the offsets written whole, 11).
func TestEntryIsCompact(t *testing.T) {
	ps := make([]Pos, 500)
	for i := range ps {
		ps[i] = Pos{ID: int64(1_000_000 + i), Broker: "broker-a", QueueID: i % 8, Offset: int64(5_000_000 + i), CommitOffset: int64(9_000_000_000 + 300*i)}
	}
	b, err := Encode(ps)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 7*len(ps) {
		t.Fatalf("%d rows take %d bytes", len(ps), len(b))
	}
}

func TestEncodeRefuses(t *testing.T) {
	for name, ps := range map[string][]Pos{
		"no rows":         nil,
		"zero id":         {{ID: 0, Broker: "b"}},
		"no broker":       {{ID: 1}},
		"negative queue":  {{ID: 1, Broker: "b", QueueID: -1}},
		"negative offset": {{ID: 1, Broker: "b", Offset: -1}},
		"commit offset":   {{ID: 1, Broker: "b", CommitOffset: -2}},
		"long name":       {{ID: 1, Broker: string(make([]byte, MaxBrokerName+1))}},
	} {
		if _, err := Encode(ps); err == nil {
			t.Errorf("%s: encoded", name)
		}
	}
}

// TestDecodeRefusesDamage: every truncation of a valid entry, and each forged field, is
// refused with ErrCorrupt rather than decoded into positions.
func TestDecodeRefusesDamage(t *testing.T) {
	b, err := Encode(samplePositions())
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(b) {
		if _, err := Decode(b[:n]); !errors.Is(err, ErrCorrupt) {
			t.Errorf("truncated to %d bytes: %v", n, err)
		}
	}
	for name, forged := range map[string][]byte{
		"version":           {2, 1, 1, 'b', 1, 2, 0, 0, 0, 0},
		"trailing bytes":    append(append([]byte{}, b...), 0),
		"broker index":      {1, 1, 1, 'b', 1, 2, 1, 0, 0, 0},
		"no brokers":        {1, 0, 1, 2, 0, 0, 0, 0},
		"no rows":           {1, 1, 1, 'b', 0},
		"negative id":       {1, 1, 1, 'b', 1, 1, 0, 0, 0, 0},
		"huge row count":    {1, 1, 1, 'b', 0xff, 0xff, 0x03, 2, 0, 0, 0, 0},
		"empty broker name": {1, 1, 0, 1, 2, 0, 0, 0, 0},
		"queue id":          {1, 1, 1, 'b', 1, 2, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0},
		"overlong varint":   {1, 1, 1, 'b', 1, 2, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0, 0},
	} {
		if ps, err := Decode(forged); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decoded %+v, %v", name, ps, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	b, _ := Encode(samplePositions())
	f.Add(b)
	f.Add([]byte{1, 1, 1, 'b', 1, 2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Encode(ps)
		if err != nil {
			t.Fatalf("decoded %+v that Encode refuses: %v", ps, err)
		}
		if got, err := Decode(again); err != nil || !reflect.DeepEqual(got, ps) {
			t.Fatalf("round trip of %+v gave %+v, %v", ps, got, err)
		}
	})
}
