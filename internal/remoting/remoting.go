// SPDX-License-Identifier: Apache-2.0

// Package remoting is a small client of RocketMQ's remoting protocol for the few requests
// the relay makes itself, beside rocketmq-client-go: asking the name servers which brokers
// are alive, so that a topic without a route can be told from a cluster without brokers, and
// the transactional-message requests (HEART_BEAT, END_TRANSACTION, check-backs, the pull of
// discarded halves), signed for brokers with ACL (WithCredentials).
//
// A frame is an int32 length, an int32 header length whose top byte names the header's
// codec (0: JSON), the header and the body. Only JSON headers are written and read; every
// read is bounded in size and time.
package remoting

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"
)

// Request codes of RocketMQ's RequestCode that this package sends.
const (
	// GetRouteInfoByTopic asks a name server for a topic's route.
	GetRouteInfoByTopic int16 = 105
	// GetBrokerClusterInfo asks a name server for the brokers registered with it.
	GetBrokerClusterInfo int16 = 106
)

// codeRequestCodeNotSupported is RocketMQ's answer to a request the server does not serve.
const codeRequestCodeNotSupported = 3

// ErrNotSupported marks an answer saying the server does not serve the request: a 5.x proxy
// asked for the name servers' broker list, for one.
var ErrNotSupported = errors.New("request not supported by the server")

// Option changes how Call connects.
type Option func(*options)

type options struct {
	tls   bool
	creds Credentials
}

// WithTLS connects with TLS, as rocketmq-client-go does with its TLS option: encrypted, the
// server's certificate not verified (the requests carry no secret).
func WithTLS(on bool) Option { return func(o *options) { o.tls = on } }

// dialer connects as o asks: with TLS unverified, as the client's own TLS (the requests
// carry nothing secret), or plain TCP.
func dialer(o options) interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
} {
	if o.tls {
		return &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}
	}
	return &net.Dialer{}
}

// topicNotExist is ResponseCode.TOPIC_NOT_EXIST.
const topicNotExist = 17

// TopicRouted asks the name server at addr whether topic has a route: true when it answers
// one, false when it answers that the topic does not exist.
func TopicRouted(ctx context.Context, addr, topic string, opts ...Option) (bool, error) {
	resp, err := Call(ctx, addr, GetRouteInfoByTopic, map[string]string{"topic": topic}, nil, opts...)
	if err != nil {
		return false, err
	}
	switch resp.Code {
	case 0:
		return true, nil
	case topicNotExist:
		return false, nil
	}
	return false, fmt.Errorf("remoting: %s answered code %d: %s", addr, resp.Code, resp.Remark)
}

// maxFrame bounds a response frame: a cluster's broker table is a few kilobytes.
const maxFrame = 16 << 20

// Response is a server's answer.
type Response struct {
	// Code is the response code; 0 is success.
	Code int16
	// Remark is the server's explanation of a non-zero code.
	Remark string
	// Ext holds the header's extension fields.
	Ext map[string]string
	// Body is the payload, often JSON written by fastjson.
	Body []byte
}

type header struct {
	Code      int16             `json:"code"`
	Language  string            `json:"language"`
	Version   int16             `json:"version"`
	Opaque    int32             `json:"opaque"`
	Flag      int32             `json:"flag"`
	Remark    string            `json:"remark,omitempty"`
	ExtFields map[string]string `json:"extFields,omitempty"`
}

var opaque atomic.Int32

// Call sends one request to addr on a new connection and returns the response. The dial,
// the write and the read all end with ctx (and within 3 seconds when ctx has no deadline).
func Call(ctx context.Context, addr string, code int16, ext map[string]string, body []byte, opts ...Option) (*Response, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	conn, err := dialer(o).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("remoting: dial %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	id := opaque.Add(1)
	frame, err := encode(header{Code: code, Language: "GO", Version: 399, Opaque: id, ExtFields: o.creds.sign(ext, body)}, body)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(frame); err != nil {
		return nil, fmt.Errorf("remoting: write to %s: %w", addr, err)
	}
	r := bufio.NewReader(conn)
	for {
		h, b, err := read(r)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
			return nil, fmt.Errorf("remoting: read from %s: %w", addr, err)
		}
		if h.Flag&1 == 0 || h.Opaque != id {
			continue // a request of the server's own, or another answer: not ours
		}
		return &Response{Code: h.Code, Remark: h.Remark, Ext: h.ExtFields, Body: b}, nil
	}
}

func encode(h header, body []byte) ([]byte, error) {
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("remoting: encode header: %w", err)
	}
	out := make([]byte, 8, 8+len(hb)+len(body))
	binary.BigEndian.PutUint32(out[0:], uint32(4+len(hb)+len(body)))
	binary.BigEndian.PutUint32(out[4:], uint32(len(hb)))
	out = append(out, hb...)
	return append(out, body...), nil
}

var errFrame = errors.New("remoting: malformed frame")

func read(r *bufio.Reader) (header, []byte, error) {
	var h header
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return h, nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 4 || size > maxFrame {
		return h, nil, fmt.Errorf("%w: length %d", errFrame, size)
	}
	frame := make([]byte, size)
	if _, err := io.ReadFull(r, frame); err != nil {
		return h, nil, err
	}
	mark := binary.BigEndian.Uint32(frame)
	if mark>>24 != 0 {
		return h, nil, fmt.Errorf("%w: header codec %d is not JSON", errFrame, mark>>24)
	}
	hlen := int(mark & 0xFFFFFF)
	if 4+hlen > len(frame) {
		return h, nil, fmt.Errorf("%w: header length %d", errFrame, hlen)
	}
	if err := json.Unmarshal(frame[4:4+hlen], &h); err != nil {
		return h, nil, fmt.Errorf("%w: %w", errFrame, err)
	}
	return h, frame[4+hlen:], nil
}

// LiveBrokers asks the name server at addr how many brokers are registered with it. It
// reads only the size of the broker table: the body is fastjson's, whose maps with number
// keys are not JSON that encoding/json accepts.
func LiveBrokers(ctx context.Context, addr string, opts ...Option) (int, error) {
	resp, err := Call(ctx, addr, GetBrokerClusterInfo, nil, nil, opts...)
	if err != nil {
		return 0, err
	}
	if resp.Code == codeRequestCodeNotSupported {
		return 0, fmt.Errorf("remoting: %s answered code %d: %s: %w", addr, resp.Code, resp.Remark, ErrNotSupported)
	}
	if resp.Code != 0 {
		return 0, fmt.Errorf("remoting: %s answered code %d: %s", addr, resp.Code, resp.Remark)
	}
	return countBrokerNames(resp.Body)
}

// countBrokerNames counts the entries of the "brokerAddrTable" object of a cluster info
// body, skipping over nested objects and strings without decoding them.
func countBrokerNames(body []byte) (int, error) {
	const key = `"brokerAddrTable"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return 0, fmt.Errorf("remoting: cluster info without brokerAddrTable")
	}
	i += len(key)
	for i < len(body) && (body[i] == ' ' || body[i] == ':') {
		i++
	}
	if i >= len(body) || body[i] != '{' {
		return 0, fmt.Errorf("remoting: brokerAddrTable is not an object")
	}
	depth, entries, inString := 0, 0, false
	for ; i < len(body); i++ {
		c := body[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return entries, nil
			}
		case ':':
			if depth == 1 {
				entries++
			}
		}
	}
	return 0, fmt.Errorf("remoting: brokerAddrTable not closed")
}
