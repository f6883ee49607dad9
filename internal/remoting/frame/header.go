// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

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

// encodeJSON writes c's JSON header byte for byte as encoding/json wrote it before (the
// differential fuzz test holds it to that): code, language, version, opaque, flag, then the
// remark and the ext fields (by key) unless empty, strings escaped alike. It never fails.
func encodeJSON(c *Command) ([]byte, error) {
	size := 96 + len(c.Language) + len(c.Remark)
	keys := make([]string, 0, len(c.Ext))
	for k, v := range c.Ext {
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(c.Code), 10)
	b = append(b, `,"language":`...)
	b = appendJSONString(b, c.Language)
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, int64(c.Version), 10)
	b = append(b, `,"opaque":`...)
	b = strconv.AppendInt(b, int64(c.Opaque), 10)
	b = append(b, `,"flag":`...)
	b = strconv.AppendInt(b, int64(c.Flag), 10)
	if c.Remark != "" {
		b = append(b, `,"remark":`...)
		b = appendJSONString(b, c.Remark)
	}
	if len(keys) > 0 {
		b = append(b, `,"extFields":{`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, c.Ext[k])
		}
		b = append(b, '}')
	}
	return append(b, '}'), nil
}

// appendJSONString appends s as a JSON string, escaped as encoding/json escapes it: quotes,
// backslashes and control characters; <, > and & (HTML); U+2028 and U+2029; each invalid
// UTF-8 byte as U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
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
