// SPDX-License-Identifier: Apache-2.0

// Package remoting is a small client of RocketMQ's remoting protocol for the few requests
// the relay makes itself, beside rocketmq-client-go: asking the name servers which brokers
// are alive, so that a topic without a route can be told from a cluster without brokers, and
// the transactional-message requests (HEART_BEAT, END_TRANSACTION, check-backs, the pull of
// discarded halves), signed for brokers with ACL (WithCredentials).
//
// Frames are read and written by internal/remoting/frame: requests go out with JSON headers,
// and answers and the brokers' own requests are read in either header serialization (JSON,
// or the binary one of a broker run with rocketmq.serialize.type=ROCKETMQ); every read is
// bounded in size and time, and a malformed frame ends the connection.
package remoting

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
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
	tls    bool
	tlsCfg *tls.Config
	creds  Credentials
}

// WithTLS connects with TLS, as rocketmq-client-go does with its TLS option: encrypted, the
// server's certificate not verified (the requests carry no secret). WithTLSConfig overrides it.
func WithTLS(on bool) Option { return func(o *options) { o.tls = on } }

// WithTLSConfig connects with TLS under cfg, which verifies the server (its RootCAs and
// ServerName; an empty ServerName verifies the host of the address dialled). nil: no change.
func WithTLSConfig(cfg *tls.Config) Option { return func(o *options) { o.tlsCfg = cfg } }

// dial connects to addr as o says: plain TCP, TLS under o.tlsCfg, or unverified TLS.
func (o options) dial(ctx context.Context, addr string) (net.Conn, error) {
	switch {
	case o.tlsCfg != nil:
		d := tls.Dialer{Config: o.tlsCfg}
		return d.DialContext(ctx, "tcp", addr)
	case o.tls:
		// Unverified, as the client's own TLS, chosen explicitly (rocketmq.tls.insecure_skip_verify).
		d := tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true}}
		return d.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
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

// request returns a request of ours: JSON headers, which every broker reads whatever its
// own serialization.
func request(code int16, id, flag int32, ext map[string]string, body []byte) *frame.Command {
	return &frame.Command{Code: code, Language: "GO", Version: 399, Opaque: id, Flag: flag, Ext: ext, Body: body}
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
	conn, err := o.dial(ctx, addr)
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
	out, err := frame.Encode(request(code, id, 0, o.creds.sign(ext, body), body))
	if err != nil {
		return nil, fmt.Errorf("remoting: encode request: %w", err)
	}
	if _, err := conn.Write(out); err != nil {
		return nil, fmt.Errorf("remoting: write to %s: %w", addr, err)
	}
	r := bufio.NewReader(conn)
	for {
		cmd, err := frame.Read(r, maxFrame)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", ctx.Err(), err)
			}
			return nil, fmt.Errorf("remoting: read from %s: %w", addr, err)
		}
		if !cmd.IsResponse() || cmd.Opaque != id {
			continue // a request of the server's own, or another answer: not ours
		}
		return responseOf(cmd), nil
	}
}

func responseOf(cmd *frame.Command) *Response {
	return &Response{Code: cmd.Code, Remark: cmd.Remark, Ext: cmd.Ext, Body: cmd.Body}
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
