// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Remoting frame layout (RocketMQ's own TCP protocol, shared by the name server and the broker):
//
//	int32 frame length (everything after this field)
//	int32 header length, its top byte being the header codec (0 JSON, 1 RocketMQ binary)
//	header bytes
//	body bytes (the rest of the frame)
const (
	codecJSON   byte = 0
	codecBinary byte = 1

	flagResponse int32 = 1      // bit 0: this command is a response
	flagOneway   int32 = 1 << 1 // bit 1: the sender expects no response

	// maxFrame bounds what we accept from a peer: the broker's message limit plus headroom.
	maxFrame = 64 << 20

	// serverVersion is what we report as our version in responses (RocketMQ 4.9.x).
	serverVersion int16 = 399
)

// Request codes we serve (see RocketMQ's RequestCode).
const (
	reqSendMessage             int16 = 10
	reqPullMessage             int16 = 11
	reqQueryMessage            int16 = 12
	reqQueryConsumerOffset     int16 = 14
	reqUpdateConsumerOffset    int16 = 15
	reqSearchOffsetByTimestamp int16 = 29
	reqGetMaxOffset            int16 = 30
	reqGetMinOffset            int16 = 31
	reqGetEarliestMsgStoreTime int16 = 32
	reqViewMessageByID         int16 = 33
	reqHeartBeat               int16 = 34
	reqUnregisterClient        int16 = 35
	reqConsumerSendMsgBack     int16 = 36
	reqGetConsumerListByGroup  int16 = 38
	reqNotifyConsumerIdsChange int16 = 40
	reqLockBatchMQ             int16 = 41
	reqUnlockBatchMQ           int16 = 42
	reqGetRouteInfoByTopic     int16 = 105
	reqGetBrokerClusterInfo    int16 = 106
	reqSendMessageV2           int16 = 310
	reqSendBatchMessage        int16 = 320
)

// Response codes we answer with (see RocketMQ's ResponseCode).
const (
	resSuccess                 int16 = 0
	resSystemError             int16 = 1
	resSlaveNotAvailable       int16 = 11
	resRequestCodeNotSupported int16 = 3
	resMessageIllegal          int16 = 13
	resTopicNotExist           int16 = 17
	resPullNotFound            int16 = 19
	resPullOffsetMoved         int16 = 21
	resQueryNotFound           int16 = 22
)

// command is one remoting command, request or response.
type command struct {
	Code    int16
	Version int16
	Opaque  int32
	Flag    int32
	Remark  string
	Ext     map[string]string
	Body    []byte
	codec   byte // header codec it arrived in; responses mirror it
}

func (c *command) isResponse() bool { return c.Flag&flagResponse != 0 }
func (c *command) isOneway() bool   { return c.Flag&flagOneway != 0 }

// newResponse makes the response to req with the given code and remark.
func newResponse(req *command, code int16, remark string) *command {
	return &command{
		Code:    code,
		Version: serverVersion,
		Opaque:  req.Opaque,
		Flag:    flagResponse,
		Remark:  remark,
		Ext:     map[string]string{},
		codec:   req.codec,
	}
}

// jsonHeader is the JSON header as the Go and Java clients write it. Language is a
// string ("GO", "JAVA") from most clients but may be a number, so it is kept raw.
type jsonHeader struct {
	Code      int16             `json:"code"`
	Language  json.RawMessage   `json:"language,omitempty"`
	Version   int16             `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
}

var errFrameTooLarge = errors.New("rmqtest: remoting frame too large")

// readCommand reads one framed command.
func readCommand(r *bufio.Reader) (*command, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(lenBuf[:]))
	if n < 4 || n > maxFrame {
		return nil, errFrameTooLarge
	}
	frame := make([]byte, n)
	if _, err := io.ReadFull(r, frame); err != nil {
		return nil, err
	}
	return decodeFrame(frame)
}

// decodeFrame decodes a frame without its leading length field.
func decodeFrame(frame []byte) (*command, error) {
	mark := binary.BigEndian.Uint32(frame[:4])
	codec := byte(mark >> 24)
	hlen := int(mark & 0xFFFFFF)
	if 4+hlen > len(frame) {
		return nil, fmt.Errorf("rmqtest: header length %d exceeds frame %d", hlen, len(frame))
	}
	header := frame[4 : 4+hlen]
	var (
		cmd *command
		err error
	)
	switch codec {
	case codecJSON:
		cmd, err = decodeJSONHeader(header)
	case codecBinary:
		cmd, err = decodeBinaryHeader(header)
	default:
		err = fmt.Errorf("rmqtest: unknown header codec %d", codec)
	}
	if err != nil {
		return nil, err
	}
	cmd.codec = codec
	if body := frame[4+hlen:]; len(body) > 0 {
		cmd.Body = body
	}
	if cmd.Ext == nil {
		cmd.Ext = map[string]string{}
	}
	return cmd, nil
}

func decodeJSONHeader(b []byte) (*command, error) {
	var h jsonHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("rmqtest: bad JSON header: %w", err)
	}
	return &command{Code: h.Code, Version: h.Version, Opaque: h.Opaque, Flag: h.Flag, Remark: h.Remark, Ext: h.ExtFields}, nil
}

// decodeBinaryHeader decodes RocketMQ's binary header: code int16, language byte,
// version int16, opaque int32, flag int32, remark (int32 length + bytes), ext fields
// (int32 total length, then int16 key length + key, int32 value length + value).
func decodeBinaryHeader(b []byte) (*command, error) {
	bad := errors.New("rmqtest: truncated binary header")
	if len(b) < 17 {
		return nil, bad
	}
	cmd := &command{
		Code:    int16(binary.BigEndian.Uint16(b[0:])),
		Version: int16(binary.BigEndian.Uint16(b[3:])),
		Opaque:  int32(binary.BigEndian.Uint32(b[5:])),
		Flag:    int32(binary.BigEndian.Uint32(b[9:])),
	}
	p := 13
	rlen := int(binary.BigEndian.Uint32(b[p:]))
	p += 4
	if rlen < 0 || p+rlen+4 > len(b) {
		return nil, bad
	}
	cmd.Remark = string(b[p : p+rlen])
	p += rlen
	elen := int(binary.BigEndian.Uint32(b[p:]))
	p += 4
	if elen < 0 || p+elen > len(b) {
		return nil, bad
	}
	ext := b[p : p+elen]
	cmd.Ext = map[string]string{}
	for len(ext) > 0 {
		if len(ext) < 2 {
			return nil, bad
		}
		kl := int(binary.BigEndian.Uint16(ext))
		if 2+kl+4 > len(ext) {
			return nil, bad
		}
		k := string(ext[2 : 2+kl])
		ext = ext[2+kl:]
		vl := int(binary.BigEndian.Uint32(ext))
		if vl < 0 || 4+vl > len(ext) {
			return nil, bad
		}
		cmd.Ext[k] = string(ext[4 : 4+vl])
		ext = ext[4+vl:]
	}
	return cmd, nil
}

// encodeCommand returns the whole frame, length prefix included, in the command's codec.
func encodeCommand(c *command) ([]byte, error) {
	var header []byte
	switch c.codec {
	case codecBinary:
		header = encodeBinaryHeader(c)
	default:
		var err error
		header, err = json.Marshal(jsonHeader{
			Code:      c.Code,
			Language:  json.RawMessage(`"JAVA"`),
			Version:   c.Version,
			Opaque:    c.Opaque,
			Flag:      c.Flag,
			Remark:    c.Remark,
			ExtFields: c.Ext,
		})
		if err != nil {
			return nil, err
		}
	}
	out := make([]byte, 8, 8+len(header)+len(c.Body))
	binary.BigEndian.PutUint32(out[0:], uint32(4+len(header)+len(c.Body)))
	binary.BigEndian.PutUint32(out[4:], uint32(c.codec)<<24|uint32(len(header)&0xFFFFFF))
	out = append(out, header...)
	out = append(out, c.Body...)
	return out, nil
}

func encodeBinaryHeader(c *command) []byte {
	b := make([]byte, 0, 64)
	b = binary.BigEndian.AppendUint16(b, uint16(c.Code))
	b = append(b, 0) // language: JAVA
	b = binary.BigEndian.AppendUint16(b, uint16(c.Version))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Opaque))
	b = binary.BigEndian.AppendUint32(b, uint32(c.Flag))
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Remark)))
	b = append(b, c.Remark...)
	var ext []byte
	for k, v := range c.Ext {
		ext = binary.BigEndian.AppendUint16(ext, uint16(len(k)))
		ext = append(ext, k...)
		ext = binary.BigEndian.AppendUint32(ext, uint32(len(v)))
		ext = append(ext, v...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(ext)))
	return append(b, ext...)
}
