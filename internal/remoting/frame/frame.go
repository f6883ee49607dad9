// SPDX-License-Identifier: Apache-2.0

// Package frame is the codec of RocketMQ's remoting protocol, shared by the relay's own
// remoting client (internal/remoting) and the protocol test broker (internal/rmqtest).
//
// A frame is
//
//	int32  length of everything after this field
//	int32  header word: top byte the header serialization (0 JSON, 1 ROCKETMQ binary),
//	       low three bytes the header length
//	header in that serialization
//	body   (the rest of the frame)
//
// The binary header is laid out as RocketMQ's RocketMQSerializable writes it: int16 code,
// byte language, int16 version, int32 opaque, int32 flag, int32 remark length and the
// remark's UTF-8 bytes, int32 ext-fields length and the ext fields, each an int16 key length,
// the key, an int32 value length and the value.
//
// Every byte read is treated as hostile: each length is checked against the bytes that
// remain and against the limits below before anything is allocated for it, and a malformed
// frame is an error (matching ErrMalformed) on which the reader closes its connection.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// Serialization names the serialization of a frame's header.
type Serialization byte

const (
	// JSON is RocketMQ's default header serialization (SerializeType.JSON).
	JSON Serialization = 0
	// RocketMQ is the binary header serialization (SerializeType.ROCKETMQ), what a broker
	// started with rocketmq.serialize.type=ROCKETMQ writes.
	RocketMQ Serialization = 1
)

// Flag bits of a command.
const (
	// FlagResponse marks a response (bit 0).
	FlagResponse int32 = 1
	// FlagOneway marks a request whose sender expects no response (bit 1).
	FlagOneway int32 = 1 << 1
)

// Limits on what a peer may send, checked before any allocation they would cause.
const (
	// MaxHeader bounds a header: the largest real one (a send whose properties fill the
	// store's 32 KiB, escaped in JSON) is well under 256 KiB.
	MaxHeader = 1 << 20
	// MaxExtFields bounds the ext fields of one header: RocketMQ's widest request header
	// has about 20, signed requests two more.
	MaxExtFields = 1024
	// MaxKeyLen bounds an ext field's key, as Java reads its length as a signed int16.
	MaxKeyLen = math.MaxInt16
	// maxHeaderWord is the largest header length the header word can carry.
	maxHeaderWord = 1<<24 - 1
)

// ErrMalformed is matched by errors.Is for every frame that breaks the layout or a limit.
var ErrMalformed = errors.New("remoting frame: malformed")

// Command is one remoting command, request or response.
type Command struct {
	// Code is the request code, or a response's result code (0 success).
	Code int16
	// Language is the sender's LanguageCode name ("JAVA", "GO", ...).
	Language string
	// Version is the sender's version (RocketMQ's MQVersion ordinal).
	Version int16
	// Opaque pairs a response with its request.
	Opaque int32
	// Flag holds FlagResponse and FlagOneway.
	Flag int32
	// Remark explains a response's code.
	Remark string
	// Ext holds the header's extension fields; never nil after a decode.
	Ext map[string]string
	// Body is the payload; nil when empty.
	Body []byte
	// Serialization is the header serialization the command arrived in, or is written in.
	Serialization Serialization
}

// IsResponse reports whether c is a response.
func (c *Command) IsResponse() bool { return c.Flag&FlagResponse != 0 }

// IsOneway reports whether c is a request its sender expects no answer to.
func (c *Command) IsOneway() bool { return c.Flag&FlagOneway != 0 }

// languages are RocketMQ's LanguageCode names, indexed by their binary code.
var languages = [...]string{"JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST", "NODE_JS"}

const otherLanguage = 7

func languageName(code int) string {
	if code < 0 || code >= len(languages) {
		return languages[otherLanguage]
	}
	return languages[code]
}

func languageCode(name string) byte {
	for i, n := range languages {
		if n == name {
			return byte(i)
		}
	}
	return otherLanguage
}

// Read reads one frame from r and decodes it. The frame's declared length is checked
// against maxFrame before anything is allocated, and the buffer then grows with the bytes
// actually received, so a peer that announces a large frame and sends nothing costs
// nothing. A stream that ends between frames gives io.EOF; one that ends inside a frame,
// io.ErrUnexpectedEOF; a frame that breaks the layout, an error matching ErrMalformed.
func Read(r io.Reader, maxFrame int) (*Command, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := int64(binary.BigEndian.Uint32(n[:]))
	if size < 4 || size > int64(maxFrame) {
		return nil, fmt.Errorf("%w: frame length %d outside [4, %d]", ErrMalformed, size, maxFrame)
	}
	b, err := readN(r, int(size))
	if err != nil {
		return nil, err
	}
	return Decode(b)
}

// readChunk is the first allocation of a frame's buffer; it doubles from there as bytes
// arrive, up to the frame's length.
const readChunk = 64 << 10

// readN reads exactly n bytes, allocating no more than twice what has arrived.
func readN(r io.Reader, n int) ([]byte, error) {
	buf := make([]byte, 0, min(n, readChunk))
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		k, err := io.ReadFull(r, buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// Decode decodes a frame without its leading length field. The body is a slice of b.
func Decode(b []byte) (*Command, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no header word", ErrMalformed, len(b))
	}
	word := binary.BigEndian.Uint32(b)
	ser, hlen := Serialization(word>>24), int(word&maxHeaderWord)
	if hlen > MaxHeader || hlen > len(b)-4 {
		return nil, fmt.Errorf("%w: header length %d in a frame of %d (limit %d)", ErrMalformed, hlen, len(b), MaxHeader)
	}
	header := b[4 : 4+hlen]
	var (
		c   *Command
		err error
	)
	switch ser {
	case JSON:
		c, err = decodeJSON(header)
	case RocketMQ:
		c, err = decodeBinary(header)
	default:
		return nil, fmt.Errorf("%w: unknown header serialization %d", ErrMalformed, ser)
	}
	if err != nil {
		return nil, err
	}
	c.Serialization = ser
	if body := b[4+hlen:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

// Encode returns c as a whole frame, length field included, its header in
// c.Serialization.
func Encode(c *Command) ([]byte, error) {
	var (
		header []byte
		err    error
	)
	switch c.Serialization {
	case JSON:
		header, err = encodeJSON(c)
	case RocketMQ:
		header, err = encodeBinary(c)
	default:
		err = fmt.Errorf("remoting frame: unknown header serialization %d", c.Serialization)
	}
	if err != nil {
		return nil, err
	}
	if len(header) > maxHeaderWord {
		return nil, fmt.Errorf("remoting frame: header of %d bytes exceeds the header word", len(header))
	}
	total := 4 + len(header) + len(c.Body)
	if total > math.MaxInt32 {
		return nil, fmt.Errorf("remoting frame: frame of %d bytes too large", total)
	}
	out := make([]byte, 0, 4+total)
	out = binary.BigEndian.AppendUint32(out, uint32(total))
	out = binary.BigEndian.AppendUint32(out, uint32(c.Serialization)<<24|uint32(len(header)))
	out = append(out, header...)
	return append(out, c.Body...), nil
}
