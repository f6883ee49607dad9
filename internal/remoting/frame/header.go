// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// jsonHeader is the JSON header as encodeJSON writes it, the language and the ext fields
// already encoded.
type jsonHeader struct {
	Code      int16           `json:"code"`
	Language  json.RawMessage `json:"language,omitempty"`
	Version   int16           `json:"version"`
	Opaque    int32           `json:"opaque"`
	Flag      int32           `json:"flag"`
	Remark    string          `json:"remark,omitempty"`
	ExtFields json.RawMessage `json:"extFields,omitempty"`
}

// decodeJSON reads a JSON header as RocketMQ's clients and servers write it, in one pass
// (jsonScan). The language is a name from Java ("GO", "JAVA") but may be a number from other
// clients; another value reads as no language. The ext fields are an object of strings (a
// null value is left out, a repeated key keeps its last value), refused at member
// MaxExtFields+1 before it is read further. Unknown members are checked and skipped.
func decodeJSON(b []byte) (*Command, error) {
	s := &jsonScan{b: b}
	c := &Command{Ext: map[string]string{}}
	if s.peek() == 'n' { // a null header, which encoding/json reads as an empty one
		if err := s.word("null"); err != nil {
			return nil, err
		}
	} else if _, err := s.members(func(key string) error { return s.headerMember(c, key) }); err != nil {
		return nil, err
	}
	if s.space(); s.i != len(b) {
		return nil, s.errorf("data after the header")
	}
	return c, nil
}

// headerMember reads the value of the header's member key into c.
func (s *jsonScan) headerMember(c *Command, key string) error {
	switch {
	case strings.EqualFold(key, "code"):
		return s.integer(16, func(v int64) { c.Code = int16(v) })
	case strings.EqualFold(key, "version"):
		return s.integer(16, func(v int64) { c.Version = int16(v) })
	case strings.EqualFold(key, "opaque"):
		return s.integer(32, func(v int64) { c.Opaque = int32(v) })
	case strings.EqualFold(key, "flag"):
		return s.integer(32, func(v int64) { c.Flag = int32(v) })
	case strings.EqualFold(key, "remark"):
		return s.remark(c)
	case strings.EqualFold(key, "language"):
		return s.language(c)
	case strings.EqualFold(key, "extFields"):
		return s.extFields(c)
	}
	return s.skip(2)
}

// remark reads the remark: a string or null.
func (s *jsonScan) remark(c *Command) error {
	switch s.peek() {
	case 'n':
		return s.word("null")
	case '"':
		v, _, err := s.str()
		c.Remark = v
		return err
	}
	return s.errorf("remark is not a string")
}

// language reads the sender's language: a name, a number, or anything else for none.
func (s *jsonScan) language(c *Command) error {
	switch s.peek() {
	case '"':
		v, raw, err := s.str()
		if err == nil && !bytes.ContainsRune(raw, '\\') {
			v = string(raw) // the usual "GO" or "JAVA", as written
		}
		c.Language = v
		return err
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		text, err := s.number()
		c.Language = ""
		if code, perr := strconv.ParseInt(text, 10, 64); err == nil && perr == nil {
			c.Language = languageName(int(code))
		}
		return err
	}
	c.Language = ""
	return s.skip(2)
}

// extFields reads the ext fields: an object of strings, or null for none.
func (s *jsonScan) extFields(c *Command) error {
	c.Ext = map[string]string{} // a repeated extFields keeps the last
	switch s.peek() {
	case 'n':
		return s.word("null")
	case '{':
	default:
		return s.errorf("extFields is not an object")
	}
	count := 0
	_, err := s.members(func(key string) error {
		if count++; count > MaxExtFields {
			return s.errorf("more than %d ext fields", MaxExtFields)
		}
		switch s.peek() {
		case 'n':
			delete(c.Ext, key)
			return s.word("null")
		case '"':
			v, _, err := s.str()
			c.Ext[key] = v
			return err
		}
		return s.errorf("ext field %q is not a string", key)
	})
	return err
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
