// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// jsonHeader is the JSON header as RocketMQ's clients and servers write it. The language
// is a name from Java ("GO", "JAVA") but may be a number from other clients, and the ext
// fields are read token by token, so both are kept raw here.
type jsonHeader struct {
	Code      int16           `json:"code"`
	Language  json.RawMessage `json:"language,omitempty"`
	Version   int16           `json:"version"`
	Opaque    int32           `json:"opaque"`
	Flag      int32           `json:"flag"`
	Remark    string          `json:"remark,omitempty"`
	ExtFields json.RawMessage `json:"extFields,omitempty"`
}

func decodeJSON(b []byte) (*Command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("%w: JSON header: %w", ErrMalformed, err)
	}
	ext, err := decodeJSONExt(h.ExtFields)
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

// decodeJSONExt reads the ext fields object. Its members are counted first, by one pass
// over the bytes, so that an object of a million fields is refused at field
// MaxExtFields+1 before any map is built; then it is decoded in one call (streaming it token
// by token cost the in-process test broker two and a half times the CPU per request).
// Values must be strings (a null value is left out), as Java's HashMap<String, String>
// writes them; a repeated key keeps its last value.
func decodeJSONExt(raw json.RawMessage) (map[string]string, error) {
	ext := map[string]string{}
	if len(raw) == 0 || string(raw) == "null" {
		return ext, nil
	}
	if raw[0] != '{' {
		return nil, fmt.Errorf("%w: JSON extFields is not an object", ErrMalformed)
	}
	if n := countMembers(raw); n > MaxExtFields {
		return nil, fmt.Errorf("%w: more than %d ext fields", ErrMalformed, MaxExtFields)
	}
	var fields map[string]*string
	if err := json.Unmarshal(raw, &fields); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("%w: JSON ext field %q is not a string", ErrMalformed, firstNonString(raw))
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

// firstNonString names the first member of the JSON object raw whose value is neither a
// string nor null: the error path only, as json.Unmarshal does not name a map's key.
func firstNonString(raw []byte) string {
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

// countMembers counts the members of the JSON object raw starts with: the colons outside
// strings at its first level. It does not validate: json.Unmarshal does that afterwards.
func countMembers(raw []byte) int {
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

func encodeJSON(c *Command) ([]byte, error) {
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

// binReader reads a binary header, each length checked against what remains.
type binReader struct {
	b   []byte
	err error
}

func (r *binReader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%w: %s of %d bytes with %d left in the header", ErrMalformed, what, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *binReader) u16(what string) int {
	if b := r.take(2, what); b != nil {
		return int(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *binReader) u32(what string) int64 {
	if b := r.take(4, what); b != nil {
		return int64(binary.BigEndian.Uint32(b))
	}
	return 0
}

// length reads an int32 length; a negative one (above MaxInt32 unsigned) is refused by
// take, for no header holds that many bytes.
func (r *binReader) length(what string) int {
	v := r.u32(what)
	if v > MaxHeader {
		v = -1
	}
	return int(v)
}

// fixedBinary is the size of the binary header's fixed part: code, language, version,
// opaque, flag, and the remark's and ext fields' length words.
const fixedBinary = 2 + 1 + 2 + 4 + 4 + 4 + 4

func decodeBinary(b []byte) (*Command, error) {
	if len(b) < fixedBinary {
		return nil, fmt.Errorf("%w: binary header of %d bytes, at least %d needed", ErrMalformed, len(b), fixedBinary)
	}
	r := &binReader{b: b}
	c := &Command{Code: int16(r.u16("code"))}
	c.Language = languageName(int(r.take(1, "language")[0]))
	c.Version = int16(r.u16("version"))
	c.Opaque = int32(r.u32("opaque"))
	c.Flag = int32(r.u32("flag"))
	c.Remark = string(r.take(r.length("remark"), "remark"))
	ext := &binReader{b: r.take(r.length("ext fields"), "ext fields")}
	if r.err != nil {
		return nil, r.err
	}
	c.Ext = map[string]string{}
	for n := 0; len(ext.b) > 0; n++ {
		if n == MaxExtFields {
			return nil, fmt.Errorf("%w: more than %d ext fields", ErrMalformed, MaxExtFields)
		}
		kl := ext.u16("ext key length")
		if kl > MaxKeyLen {
			return nil, fmt.Errorf("%w: ext key of %d bytes (limit %d)", ErrMalformed, kl, MaxKeyLen)
		}
		k := ext.take(kl, "ext key")
		v := ext.take(ext.length("ext value"), "ext value")
		if ext.err != nil {
			return nil, ext.err
		}
		c.Ext[string(k)] = string(v)
	}
	return c, nil
}

func encodeBinary(c *Command) ([]byte, error) {
	size := fixedBinary + len(c.Remark)
	for k, v := range c.Ext {
		if len(k) > MaxKeyLen {
			return nil, fmt.Errorf("remoting frame: ext key of %d bytes (limit %d)", len(k), MaxKeyLen)
		}
		size += 2 + len(k) + 4 + len(v)
	}
	if size > maxHeaderWord {
		return nil, fmt.Errorf("remoting frame: binary header of %d bytes exceeds the header word", size)
	}
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint16(b, uint16(c.Code))
	b = append(b, languageCode(c.Language))
	b = binary.BigEndian.AppendUint16(b, uint16(c.Version))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Flag))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Remark)))
	b = append(b, c.Remark...)
	b = binary.BigEndian.AppendUint32(b, uint32(size-len(b)-4))
	for _, k := range slices.Sorted(maps.Keys(c.Ext)) { // sorted: the same command, the same bytes
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.Ext[k])))
		b = append(b, c.Ext[k]...)
	}
	return b, nil
}
