// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"testing"
)

// FuzzDecode feeds arbitrary frames to the decoder: it must never panic, and whatever it
// accepts must encode again and decode to the same command.
func FuzzDecode(f *testing.F) {
	for _, ser := range []Serialization{JSON, RocketMQ} {
		b, err := Encode(sample(ser))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[4:])
	}
	f.Add(rawFrame(RocketMQ, binaryHeader(0, nil, 7, []byte{0, 1, 'k', 0, 0, 0, 0}), []byte("body")))
	f.Add(rawFrame(JSON, []byte(`{"code":105,"language":9,"extFields":{"a":"b"}}`), nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			return
		}
		// One round normalises what JSON cannot carry (invalid UTF-8, unknown languages);
		// from there the command must survive encoding unchanged.
		once := roundTrip(t, c)
		twice := roundTrip(t, once)
		if !sameCommand(once, twice) {
			t.Fatalf("round trip changed %+v into %+v", once, twice)
		}
		if _, err := Read(bytes.NewReader(mustEncode(t, twice)), len(b)+1<<20); err != nil {
			t.Fatalf("Read of an encoded command: %v", err)
		}
	})
}

func mustEncode(t *testing.T, c *Command) []byte {
	b, err := Encode(c)
	if err != nil {
		t.Fatalf("encode %+v: %v", c, err)
	}
	return b
}

func roundTrip(t *testing.T, c *Command) *Command {
	out, err := Decode(mustEncode(t, c)[4:])
	if err != nil {
		t.Fatalf("decode of encoded %+v: %v", c, err)
	}
	return out
}
