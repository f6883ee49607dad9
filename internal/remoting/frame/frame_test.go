// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"maps"
	"runtime"
	"strings"
	"testing"
)

func sample(ser Serialization) *Command {
	return &Command{Code: 39, Language: "JAVA", Version: 317, Opaque: 42, Flag: FlagOneway, Remark: "ré",
		Ext: map[string]string{"a": "group", "bname": "broker-a", "i": "K\x01V\x02"}, Body: []byte{0, 1, 2, 255}, Serialization: ser}
}

func sameCommand(a, b *Command) bool {
	return a.Code == b.Code && a.Language == b.Language && a.Version == b.Version && a.Opaque == b.Opaque &&
		a.Flag == b.Flag && a.Remark == b.Remark && maps.Equal(a.Ext, b.Ext) && bytes.Equal(a.Body, b.Body) &&
		a.Serialization == b.Serialization
}

func TestRoundTripBothSerializations(t *testing.T) {
	for _, ser := range []Serialization{JSON, RocketMQ} {
		in := sample(ser)
		b, err := Encode(in)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Read(bytes.NewReader(b), 1<<20)
		if err != nil {
			t.Fatalf("serialization %d: %v", ser, err)
		}
		if !sameCommand(in, out) {
			t.Fatalf("serialization %d: got %+v, want %+v", ser, out, in)
		}
	}
}

// TestBinaryLayout pins the binary header byte by byte, as RocketMQSerializable writes it:
// code, language, version, opaque, flag, remark, ext fields (int16 key length, int32 value
// length).
func TestBinaryLayout(t *testing.T) {
	c := &Command{Code: 39, Language: "GO", Version: 399, Opaque: 7, Flag: FlagOneway, Remark: "r",
		Ext: map[string]string{"k": "vv"}, Body: []byte("B"), Serialization: RocketMQ}
	want := []byte{
		0, 0, 0, 36, // frame length: 4 + 31 + 1
		1, 0, 0, 31, // binary, header of 31 bytes
		0, 39, // code
		9,      // language GO
		1, 143, // version 399
		0, 0, 0, 7, // opaque
		0, 0, 0, 2, // flag: oneway
		0, 0, 0, 1, 'r', // remark
		0, 0, 0, 9, 0, 1, 'k', 0, 0, 0, 2, 'v', 'v', // ext fields
		'B', // body
	}
	got, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded\n%v\nwant\n%v", got, want)
	}
	back, err := Decode(want[4:])
	if err != nil || !sameCommand(back, c) {
		t.Fatalf("decoded %+v, %v", back, err)
	}
}

// TestJSONLanguageAsNumber reads a header whose language is a number, as some clients write it.
func TestJSONLanguageAsNumber(t *testing.T) {
	c, err := decodeJSON([]byte(`{"code":105,"language":9,"version":1,"opaque":3,"flag":0,"extFields":{"topic":"T","n":null}}`))
	if err != nil || c.Language != "GO" || c.Ext["topic"] != "T" || len(c.Ext) != 1 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
}

// An ext field that is not a string is refused with its key named, and a string whose
// text holds braces, colons and escaped quotes counts as one member.
func TestJSONExtFieldsCheckedOneByOne(t *testing.T) {
	_, err := decodeJSON([]byte(`{"code":1,"extFields":{"topic":"T","queueId":3}}`))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), `"queueId" is not a string`) {
		t.Fatalf("a number value: %v, want the key named", err)
	}
	c, err := decodeJSON([]byte(`{"code":1,"extFields":{"p":"{\"a\":1}, b:c","q":"\\"}}`))
	if err != nil || c.Ext["p"] != `{"a":1}, b:c` || c.Ext["q"] != `\` || len(c.Ext) != 2 {
		t.Fatalf("decoded %+v, %v", c, err)
	}
}

// header builds a frame (without its length field) of serialization ser around header h.
func rawFrame(ser Serialization, h []byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(ser)<<24|uint32(len(h)))
	return append(append(b, h...), body...)
}

// binaryHeader writes a binary header with the given remark length word and ext bytes.
func binaryHeader(remarkLen uint32, remark []byte, extLen uint32, ext []byte) []byte {
	b := []byte{0, 39, 0, 1, 143, 0, 0, 0, 1, 0, 0, 0, 0}
	b = binary.BigEndian.AppendUint32(b, remarkLen)
	b = append(b, remark...)
	b = binary.BigEndian.AppendUint32(b, extLen)
	return append(b, ext...)
}

func entries(n int) []byte {
	var b []byte
	for i := 0; i < n; i++ {
		k := []byte{byte(i >> 8), byte(i)}
		b = binary.BigEndian.AppendUint16(b, 2)
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, 0)
	}
	return b
}

// TestHostileFramesRefused feeds Decode every malformed shape: each is an error matching
// ErrMalformed, never a panic.
func TestHostileFramesRefused(t *testing.T) {
	bomb := entries(MaxExtFields + 1)
	jsonBomb := `{"code":1,"extFields":{` + strings.Repeat(`"k":"",`, MaxExtFields) + `"z":""}}`
	cases := map[string][]byte{
		"no header word":             {1, 0},
		"header longer than frame":   {0, 0, 0, 10, '{', '}'},
		"header over the limit":      append(binary.BigEndian.AppendUint32(nil, MaxHeader+1), make([]byte, MaxHeader+1)...),
		"unknown serialization":      rawFrame(2, []byte{}, nil),
		"binary header too short":    rawFrame(RocketMQ, []byte{0, 1, 0}, nil),
		"remark length huge":         rawFrame(RocketMQ, binaryHeader(0xFFFFFFFF, nil, 0, nil), nil),
		"remark length negative":     rawFrame(RocketMQ, binaryHeader(0x80000000, nil, 0, nil), nil),
		"remark past the header":     rawFrame(RocketMQ, binaryHeader(100, []byte("short"), 0, nil), nil),
		"ext length past the header": rawFrame(RocketMQ, binaryHeader(0, nil, 1000, entries(1)), nil),
		"ext length huge":            rawFrame(RocketMQ, binaryHeader(0, nil, 0x7FFFFFFF, nil), nil),
		"ext count bomb":             rawFrame(RocketMQ, binaryHeader(0, nil, uint32(len(bomb)), bomb), nil),
		"ext key past the fields":    rawFrame(RocketMQ, binaryHeader(0, nil, 4, []byte{0, 9, 'k', 'k'}), nil),
		"ext key length only":        rawFrame(RocketMQ, binaryHeader(0, nil, 1, []byte{0}), nil),
		"ext value past the fields":  rawFrame(RocketMQ, binaryHeader(0, nil, 7, []byte{0, 1, 'k', 0, 0, 1, 0}), nil),
		"ext value length negative":  rawFrame(RocketMQ, binaryHeader(0, nil, 7, []byte{0, 1, 'k', 0xFF, 0xFF, 0xFF, 0xFF}), nil),
		"JSON garbage":               rawFrame(JSON, []byte(`{"code":`), nil),
		"JSON code out of range":     rawFrame(JSON, []byte(`{"code":70000}`), nil),
		"JSON ext not an object":     rawFrame(JSON, []byte(`{"extFields":["a"]}`), nil),
		"JSON ext value not string":  rawFrame(JSON, []byte(`{"extFields":{"a":{"b":"c"}}}`), nil),
		"JSON ext count bomb":        rawFrame(JSON, []byte(jsonBomb), nil),
	}
	for name, b := range cases {
		if c, err := Decode(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: got %+v, %v; want ErrMalformed", name, c, err)
		}
	}
	// The limit itself is allowed.
	ok := entries(MaxExtFields)
	if c, err := Decode(rawFrame(RocketMQ, binaryHeader(0, nil, uint32(len(ok)), ok), nil)); err != nil || len(c.Ext) != MaxExtFields {
		t.Fatalf("%d ext fields: %v", MaxExtFields, err)
	}
}

// TestFrameLengthBoundedBeforeRead: a frame announcing more than the limit, or less than
// a header word, is refused from its length field alone.
func TestFrameLengthBoundedBeforeRead(t *testing.T) {
	for _, n := range []uint32{0, 3, 1<<20 + 1, 0xFFFFFFFF} {
		r := bytes.NewReader(binary.BigEndian.AppendUint32(nil, n))
		if _, err := Read(r, 1<<20); !errors.Is(err, ErrMalformed) {
			t.Errorf("length %d: %v, want ErrMalformed", n, err)
		}
	}
}

// TestTruncatedFramesAreErrors cuts a valid frame at every byte: each prefix is an error
// (io.EOF only before the first byte), never a panic or a short command.
func TestTruncatedFramesAreErrors(t *testing.T) {
	for _, ser := range []Serialization{JSON, RocketMQ} {
		full, err := Encode(sample(ser))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(full); i++ {
			_, err := Read(bytes.NewReader(full[:i]), 1<<20)
			switch {
			case i == 0 && err != io.EOF:
				t.Fatalf("serialization %d, empty stream: %v, want io.EOF", ser, err)
			case i > 0 && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Fatalf("serialization %d, %d of %d bytes: %v, want io.ErrUnexpectedEOF", ser, i, len(full), err)
			}
		}
	}
}

// TestAnnouncedFrameCostsOnlyWhatArrives: a peer announcing a frame of the whole limit and
// then sending 10 bytes makes the reader allocate about what arrived, not the limit.
func TestAnnouncedFrameCostsOnlyWhatArrives(t *testing.T) {
	const limit = 64 << 20
	stream := append(binary.BigEndian.AppendUint32(nil, limit), make([]byte, 10)...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Read(bytes.NewReader(stream), limit)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Read: %v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("allocated %d bytes for a frame that sent 10", got)
	}
}

// BenchmarkDecodeSendHeader decodes a send request's JSON header as the Go client writes
// it: the in-process test broker and the relay's own remoting read every frame this way.
func BenchmarkDecodeSendHeader(b *testing.B) {
	ext := map[string]string{"a": "PG", "b": "orders", "c": "TBW102", "d": "4", "e": "3", "f": "0",
		"g": "1732761600000", "h": "0", "i": "OUTBOX_MSG_ID\x01m-1234567890\x02KEYS\x01m-1234567890\x02TAGS\x01created\x02",
		"j": "0", "k": "false", "m": "false", "n": "broker-a"}
	f, err := Encode(&Command{Code: 310, Language: "GO", Ext: ext, Body: []byte("body")})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(f[4:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeSendAnswer encodes what the test broker answers a send with: a response
// header of a few ext fields.
func BenchmarkEncodeSendAnswer(b *testing.B) {
	c := &Command{Code: 0, Flag: FlagResponse, Opaque: 7, Language: "JAVA", Ext: map[string]string{
		"msgId": "7F00000100002A9F0000000000001234", "queueId": "3", "queueOffset": "123456",
		"transactionId": "", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(c); err != nil {
			b.Fatal(err)
		}
	}
}
