// SPDX-License-Identifier: Apache-2.0

package frame

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxJSONDepth bounds the nesting of a header's values, as encoding/json does.
const maxJSONDepth = 10000

// jsonScan reads one JSON header in a single pass over its bytes, reading what encoding/json
// would read into the header's fields (the differential fuzz test holds it to that) at a
// tenth of the cost: every request and answer the relay and the test broker exchange goes
// through it.
type jsonScan struct {
	b []byte
	i int
}

// errorf returns a malformed-header error at the scan's offset.
func (s *jsonScan) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: JSON header at byte %d: %s", ErrMalformed, s.i, fmt.Sprintf(format, args...))
}

// space skips white space.
func (s *jsonScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// next skips white space and consumes c if it comes next.
func (s *jsonScan) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek skips white space and returns the next byte (0 at the end).
func (s *jsonScan) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// literal consumes word (null, true, false) if it comes next.
func (s *jsonScan) literal(word string) bool {
	if len(s.b)-s.i >= len(word) && string(s.b[s.i:s.i+len(word)]) == word {
		s.i += len(word)
		return true
	}
	return false
}

// members reads an object's members, calling member with each key once the scan stands
// on its value; member must consume the value. It returns the members read.
func (s *jsonScan) members(member func(key string) error) (int, error) {
	if !s.next('{') {
		return 0, s.errorf("want an object")
	}
	if s.next('}') {
		return 0, nil
	}
	for n := 1; ; n++ {
		s.space()
		key, _, err := s.str()
		if err != nil {
			return n, err
		}
		if !s.next(':') {
			return n, s.errorf("want ':' after a key")
		}
		s.space()
		if err := member(key); err != nil {
			return n, err
		}
		if s.next('}') {
			return n, nil
		}
		if !s.next(',') {
			return n, s.errorf("want ',' or '}'")
		}
	}
}

// str reads a string; raw is its bytes between the quotes, as written.
func (s *jsonScan) str() (val string, raw []byte, err error) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", nil, s.errorf("want a string")
	}
	start := s.i + 1
	plain := true
	for s.i = start; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			if plain && utf8.Valid(raw) {
				return string(raw), raw, nil
			}
			return unquote(raw), raw, nil
		case c == '\\':
			plain = false
			s.i++
			if err := s.escape(); err != nil {
				return "", nil, err
			}
		case c < 0x20:
			return "", nil, s.errorf("control character in a string")
		}
	}
	return "", nil, s.errorf("unterminated string")
}

// escape checks the escape whose letter the scan stands on, leaving the scan on its last
// byte.
func (s *jsonScan) escape() error {
	if s.i >= len(s.b) {
		return s.errorf("unterminated escape")
	}
	switch s.b[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		return nil
	case 'u':
		if s.i+4 >= len(s.b) {
			return s.errorf("short \\u escape")
		}
		if _, ok := hex4(s.b[s.i+1 : s.i+5]); !ok {
			return s.errorf("bad \\u escape")
		}
		s.i += 4
		return nil
	}
	return s.errorf("bad escape")
}

// hex4 reads four hexadecimal digits.
func hex4(b []byte) (rune, bool) {
	var r rune
	for _, c := range b {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// unquote decodes the checked bytes of a string with escapes or invalid UTF-8 as
// encoding/json does: invalid bytes and unpaired surrogates read as U+FFFD.
func unquote(raw []byte) string {
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			i += unescape(&b, raw[i:])
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			b.WriteRune(r) // RuneError for an invalid byte, one per byte
			i += size
		}
	}
	return b.String()
}

// unescape writes the escape at the start of e and returns its length.
func unescape(b *strings.Builder, e []byte) int {
	switch e[1] {
	case 'b':
		b.WriteByte('\b')
		return 2
	case 'f':
		b.WriteByte('\f')
		return 2
	case 'n':
		b.WriteByte('\n')
		return 2
	case 'r':
		b.WriteByte('\r')
		return 2
	case 't':
		b.WriteByte('\t')
		return 2
	case 'u':
	default: // '"', '\\', '/'
		b.WriteByte(e[1])
		return 2
	}
	r, _ := hex4(e[2:6])
	if utf16.IsSurrogate(r) {
		if len(e) >= 12 && e[6] == '\\' && e[7] == 'u' {
			if r2, ok := hex4(e[8:12]); ok {
				if pair := utf16.DecodeRune(r, r2); pair != utf8.RuneError {
					b.WriteRune(pair)
					return 12
				}
			}
		}
		r = utf8.RuneError
	}
	b.WriteRune(r)
	return 6
}

// number reads a number and returns its text.
func (s *jsonScan) number() (string, error) {
	start := s.i
	s.i += s.run("-")
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return "", s.errorf("bad number")
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return "", s.errorf("bad number")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		s.i += s.run("+-")
		if s.digits() == 0 {
			return "", s.errorf("bad number")
		}
	}
	return string(s.b[start:s.i]), nil
}

// run returns 1 if the next byte is one of set, else 0.
func (s *jsonScan) run(set string) int {
	if s.i < len(s.b) && strings.IndexByte(set, s.b[s.i]) >= 0 {
		return 1
	}
	return 0
}

// digits consumes decimal digits and returns how many.
func (s *jsonScan) digits() int {
	start := s.i
	for s.i < len(s.b) && '0' <= s.b[s.i] && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}

// skip reads and checks one value of any kind; an object or array it opens is depth levels
// deep.
func (s *jsonScan) skip(depth int) error {
	switch c := s.peek(); c {
	case '"':
		_, _, err := s.str()
		return err
	case '{', '[':
		if depth > maxJSONDepth {
			return s.errorf("nested too deep")
		}
		if c == '[' {
			return s.elements(depth)
		}
		_, err := s.members(func(string) error { return s.skip(depth + 1) })
		return err
	case 't':
		return s.word("true")
	case 'f':
		return s.word("false")
	case 'n':
		return s.word("null")
	}
	_, err := s.number()
	return err
}

// word consumes the literal w or fails.
func (s *jsonScan) word(w string) error {
	if !s.literal(w) {
		return s.errorf("bad literal")
	}
	return nil
}

// elements reads and checks an array that is depth levels deep.
func (s *jsonScan) elements(depth int) error {
	s.i++ // '['
	if s.next(']') {
		return nil
	}
	for {
		if err := s.skip(depth + 1); err != nil {
			return err
		}
		if s.next(']') {
			return nil
		}
		if !s.next(',') {
			return s.errorf("want ',' or ']'")
		}
	}
}

// integer reads a number or null into an integer of bits bits; set is called only for a
// number. Another value, a fraction or an overflow is an error, as encoding/json makes it.
func (s *jsonScan) integer(bits int, set func(int64)) error {
	switch s.peek() {
	case 'n':
		return s.word("null")
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		text, err := s.number()
		if err != nil {
			return err
		}
		v, err := strconv.ParseInt(text, 10, bits)
		if err != nil {
			return s.errorf("%s is not an int%d", text, bits)
		}
		set(v)
		return nil
	}
	return s.errorf("want a number")
}
