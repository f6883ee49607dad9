// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// jsonHeader is the JSON header as the reference encoder and decoder read and write it.
type jsonHeader struct {
	Code      int16           `json:"code"`
	Language  json.RawMessage `json:"language,omitempty"`
	Version   int16           `json:"version"`
	Opaque    int32           `json:"opaque"`
	Flag      int32           `json:"flag"`
	Remark    string          `json:"remark,omitempty"`
	ExtFields json.RawMessage `json:"extFields,omitempty"`
}

// referenceDecodeJSON is the JSON header decoder written on encoding/json that decodeJSON
// replaced: FuzzJSONHeaderAsEncodingJSONReadsIt holds decodeJSON to what it reads.
func referenceDecodeJSON(b []byte) (*Command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%w: JSON header: %w", ErrMalformed, err)
	}
	ext, err := referenceDecodeJSONExt(h.ExtFields)
	if err != nil {
		return nil, err
	}
	c := &Command{Code: h.Code, Version: h.Version, Opaque: h.Opaque, Flag: h.Flag, Remark: h.Remark, Ext: ext}
	var name string
	var code int
	switch l := h.Language; {
	case len(l) >= 2 && l[0] == '"' && l[len(l)-1] == '"' && !bytes.ContainsRune(l, '\\'):
		c.Language = string(l[1 : len(l)-1]) // the usual "GO" or "JAVA", without a decoder
	case json.Unmarshal(h.Language, &name) == nil:
		c.Language = name
	case json.Unmarshal(h.Language, &code) == nil:
		c.Language = languageName(code)
	}
	return c, nil
}

// referenceDecodeJSONExt reads the ext fields object. Its members are counted first, by one pass
// over the bytes, so that an object of a million fields is refused at field
// MaxExtFields+1 before any map is built; then it is decoded in one call (streaming it token
// by token cost the in-process test broker two and a half times the CPU per request).
// Values must be strings (a null value is left out), as Java's HashMap<String, String>
// writes them; a repeated key keeps its last value.
func referenceDecodeJSONExt(raw json.RawMessage) (map[string]string, error) {
	ext := map[string]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return ext, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("%w: JSON extFields is not an object", ErrMalformed)
	}
	if n := referenceCountMembers(raw); n > MaxExtFields {
		return nil, fmt.Errorf("%w: more than %d ext fields", ErrMalformed, MaxExtFields)
	}
	var fields map[string]*string
	if err := json.Unmarshal(raw, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: JSON ext field %q is not a string", ErrMalformed, referenceFirstNonString(raw))
		}
		return nil, fmt.Errorf("%w: JSON extFields: %w", ErrMalformed, err)
	}
	for k, v := range fields {
		if v != nil {
			ext[k] = *v
		}
	}
	return ext, nil
}

// referenceFirstNonString names the first member of the JSON object raw whose value is neither a
// string nor null: the error path only, as json.Unmarshal does not name a map's key.
func referenceFirstNonString(raw []byte) string {
	d := json.NewDecoder(bytes.NewReader(raw))
	if _, err := d.Token(); err != nil {
		return ""
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return ""
		}
		var v any
		if err := d.Decode(&v); err != nil {
			return ""
		}
		if _, ok := v.(string); !ok && v != nil {
			key, _ := k.(string)
			return key
		}
	}
	return ""
}

// referenceCountMembers counts the members of the JSON object raw starts with: the colons outside
// strings at its first level. It does not validate: json.Unmarshal does that afterwards.
func referenceCountMembers(raw []byte) int {
	n, depth, inString, escaped := 0, 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			n++
		}
	}
	return n
}

// referenceEncodeJSON is the JSON header encoder on encoding/json that encodeJSON replaced:
// FuzzJSONHeaderAsEncodingJSONWritesIt holds encodeJSON to its bytes.
func referenceEncodeJSON(c *Command) ([]byte, error) {
	lang, err := json.Marshal(c.Language)
	if err != nil {
		return nil, err
	}
	var ext json.RawMessage
	if len(c.Ext) > 0 {
		if ext, err = json.Marshal(c.Ext); err != nil {
			return nil, fmt.Errorf("remoting frame: encode ext fields: %w", err)
		}
	}
	b, err := json.Marshal(jsonHeader{Code: c.Code, Language: lang, Version: c.Version, Opaque: c.Opaque,
		Flag: c.Flag, Remark: c.Remark, ExtFields: ext})
	if err != nil {
		return nil, fmt.Errorf("remoting frame: encode header: %w", err)
	}
	return b, nil
}

// FuzzJSONHeaderAsEncodingJSONReadsIt holds the one-pass header reader to the decoder on
// encoding/json it replaced: for every input, both refuse it, or both read the same command.
func FuzzJSONHeaderAsEncodingJSONReadsIt(f *testing.F) {
	for _, seed := range []string{
		`{"code":105,"language":"GO","version":317,"opaque":3,"flag":0,"extFields":{"topic":"T","n":null}}`,
		`{"code":1,"language":9,"remark":"a\"b\\u00e9\ud83d\ude00","extFields":{"p":"{\"a\":1}, b:c","q":"\\"}}`,
		`{"CODE":-1,"Language":true,"serializeTypeCurrentRPC":"JSON","x":[1,{"y":[null,false]}],"extFields":null}`,
		`{"code":1.5}`, `{"code":70000}`, `{"flag":1e3}`, `{"remark":3}`, `{"extFields":[]}`, `{"extFields":{"a":1}}`,
		`null`, `[]`, ` {"code":1} `, `{"code":1}x`, `{"language":"\ud800x","extFields":{"\udc00":"\xff"}}`,
		`{"a":01}`, `{"a":-}`, `{"a":"` + "\x01" + `"}`, `{"extFields":{"a":"b","a":null}}`, `{,}`, `{"a":1,}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wantErr := referenceDecodeJSON(b)
		got, err := decodeJSON(b)
		if (wantErr == nil) != (err == nil) {
			t.Fatalf("%q: encoding/json says %v, decodeJSON says %v", b, wantErr, err)
		}
		if err == nil && !sameCommand(want, got) {
			t.Fatalf("%q: encoding/json reads %+v, decodeJSON %+v", b, want, got)
		}
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("%q: %v does not match ErrMalformed", b, err)
		}
	})
}

// FuzzJSONHeaderAsEncodingJSONWritesIt holds encodeJSON to the encoder on encoding/json it
// replaced, byte for byte. The ext fields are the fuzzed text's NUL-separated key, value
// pairs.
func FuzzJSONHeaderAsEncodingJSONWritesIt(f *testing.F) {
	f.Add(int16(310), int16(317), int32(7), int32(1), "GO", "", "topic\x00T\x00queueId\x003")
	f.Add(int16(-1), int16(0), int32(-9), int32(0), "JAVA", "a<b>&\"\\\n\t\b\f\x01\x7f", "k\u2028\x00\xff\xfe v\u2029")
	f.Add(int16(0), int16(0), int32(0), int32(0), "", "remark \xc3", "")
	f.Fuzz(func(t *testing.T, code, version int16, opaque, flag int32, language, remark, ext string) {
		c := &Command{Code: code, Version: version, Opaque: opaque, Flag: flag, Language: language, Remark: remark, Ext: map[string]string{}}
		fields := strings.Split(ext, "\x00")
		for i := 0; i+1 < len(fields); i += 2 {
			c.Ext[fields[i]] = fields[i+1]
		}
		want, err := referenceEncodeJSON(c)
		if err != nil {
			t.Fatalf("encoding/json: %v", err)
		}
		got, _ := encodeJSON(c)
		if !bytes.Equal(got, want) {
			t.Fatalf("%+v:\nencoding/json %s\nencodeJSON    %s", c, want, got)
		}
	})
}
