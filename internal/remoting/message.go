// SPDX-License-Identifier: Apache-2.0

package remoting

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
)

// Message is a stored message as a broker encodes it in a check-back's body.
type Message struct {
	// Topic and QueueID are where the message goes (for a half: its real topic and queue).
	Topic   string
	QueueID int32
	// QueueOffset and CommitLogOffset locate the stored copy.
	QueueOffset     int64
	CommitLogOffset int64
	// SysFlag is the message's system flag.
	SysFlag int32
	// BornTimestamp is the producer's clock at the send, epoch milliseconds.
	BornTimestamp int64
	// Body is the payload as stored: zlib-compressed when Compressed is set. It is never
	// inflated here (a hostile frame could name a small body that inflates to gigabytes).
	Body []byte
	// Compressed reports a compressed body (bit 0 of SysFlag).
	Compressed bool
	// Properties holds every property, system ones included.
	Properties map[string]string
}

const (
	magicV1 uint32 = 0xDAA320A7 // MESSAGE_MAGIC_CODE
	magicV2 uint32 = 0xDAA320AB // MESSAGE_MAGIC_CODE_V2: two-byte topic length
)

var errShort = errors.New("remoting: message truncated")

// DecodeMessage decodes one message in the broker's store format (MessageDecoder's layout,
// IPv4 or IPv6 hosts). A compressed body is left compressed: nothing that reads a check or a
// discarded half needs it, and inflating a frame's body before its sender is known would let
// any producer make the reader allocate without bound.
func DecodeMessage(b []byte) (*Message, error) {
	p := 0
	need := func(n int) error {
		if n < 0 || p+n > len(b) {
			return errShort
		}
		return nil
	}
	u32 := func() uint32 { v := binary.BigEndian.Uint32(b[p:]); p += 4; return v }
	u64 := func() uint64 { v := binary.BigEndian.Uint64(b[p:]); p += 8; return v }
	if err := need(4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8); err != nil {
		return nil, err
	}
	m := &Message{}
	p += 4 // total size
	magic := u32()
	if magic != magicV1 && magic != magicV2 {
		return nil, fmt.Errorf("remoting: message magic %#x unknown", magic)
	}
	p += 4 // body CRC
	m.QueueID = int32(u32())
	p += 4 // flag
	m.QueueOffset = int64(u64())
	m.CommitLogOffset = int64(u64())
	m.SysFlag = int32(u32())
	m.BornTimestamp = int64(u64())
	bornLen, storeLen := 4, 4
	if m.SysFlag&(1<<4) != 0 {
		bornLen = 16
	}
	if m.SysFlag&(1<<5) != 0 {
		storeLen = 16
	}
	if err := need(bornLen + 4 + 8 + storeLen + 4 + 4 + 8 + 4); err != nil {
		return nil, err
	}
	p += bornLen + 4 + 8 + storeLen + 4 + 4 + 8
	bl := int(int32(u32()))
	if err := need(bl); err != nil {
		return nil, err
	}
	m.Body = b[p : p+bl]
	p += bl
	tl := 0
	if magic == magicV2 {
		if err := need(2); err != nil {
			return nil, err
		}
		tl = int(binary.BigEndian.Uint16(b[p:]))
		p += 2
	} else {
		if err := need(1); err != nil {
			return nil, err
		}
		tl = int(b[p])
		p++
	}
	if err := need(tl + 2); err != nil {
		return nil, err
	}
	m.Topic = string(b[p : p+tl])
	p += tl
	pl := int(binary.BigEndian.Uint16(b[p:]))
	p += 2
	if err := need(pl); err != nil {
		return nil, err
	}
	m.Properties = ParseProperties(string(b[p : p+pl]))
	m.Compressed = m.SysFlag&1 != 0
	return m, nil
}

// ParseProperties splits RocketMQ's property string (name \x01 value \x02 ...).
func ParseProperties(s string) map[string]string {
	out := map[string]string{}
	for _, item := range strings.Split(s, "\x02") {
		if k, v, ok := strings.Cut(item, "\x01"); ok {
			out[k] = v
		}
	}
	return out
}

// Masters asks the name server at addr for the master (broker id 0) of every broker name
// it knows, as a map from broker name to address. opts choose how to connect (WithTLSConfig).
func Masters(ctx context.Context, addr string, opts ...Option) (map[string]string, error) {
	resp, err := Call(ctx, addr, GetBrokerClusterInfo, nil, nil, opts...)
	if err != nil {
		return nil, err
	}
	if resp.Code != 0 {
		return nil, fmt.Errorf("remoting: %s answered code %d: %s", addr, resp.Code, resp.Remark)
	}
	var info struct {
		BrokerAddrTable map[string]struct {
			BrokerAddrs map[string]string `json:"brokerAddrs"`
		} `json:"brokerAddrTable"`
	}
	if err := json.Unmarshal(QuoteNumberKeys(resp.Body), &info); err != nil {
		return nil, fmt.Errorf("remoting: cluster info from %s: %w", addr, err)
	}
	out := map[string]string{}
	for name, bd := range info.BrokerAddrTable {
		if a := bd.BrokerAddrs["0"]; a != "" {
			out[name] = a
		}
	}
	return out, nil
}

// FindMasters asks the name servers in turn for the masters they know and merges their
// answers (broker name to master address), stopping once enough reports the merged map
// suffices (nil: every name server is asked, for each may know brokers the others do not).
// It fails only when no name server answered; the map then is empty, not nil. opts are
// Masters' (TLS).
func FindMasters(ctx context.Context, nameServers []string, enough func(map[string]string) bool, opts ...Option) (map[string]string, error) {
	out := map[string]string{}
	var errs []error
	for _, ns := range nameServers {
		m, err := Masters(ctx, ns, opts...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		maps.Copy(out, m)
		if enough != nil && enough(out) {
			return out, nil
		}
	}
	if len(errs) == len(nameServers) {
		return out, fmt.Errorf("remoting: no name server answered: %w", errors.Join(errs...))
	}
	return out, nil
}

// QuoteNumberKeys turns fastjson's unquoted number keys ({0:"a"}) into JSON strings, so that
// encoding/json reads the name servers' bodies (routes, cluster info).
func QuoteNumberKeys(b []byte) []byte {
	out := make([]byte, 0, len(b)+16)
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			out = append(out, c)
			switch c {
			case '\\':
				if i+1 < len(b) {
					i++
					out = append(out, b[i])
				}
			case '"':
				inString = false
			}
			continue
		}
		if c == '"' {
			inString = true
			out = append(out, c)
			continue
		}
		out = append(out, c)
		if c != '{' && c != ',' {
			continue
		}
		j := i + 1
		for j < len(b) && (b[j] == ' ' || b[j] == '\n' || b[j] == '\t' || b[j] == '\r') {
			j++
		}
		k := j
		for k < len(b) && (b[k] == '-' || (b[k] >= '0' && b[k] <= '9')) {
			k++
		}
		if k > j && k < len(b) && b[k] == ':' {
			out = append(out, b[i+1:j]...)
			out = append(out, '"')
			out = append(out, b[j:k]...)
			out = append(out, '"')
			i = k - 1
		}
	}
	return out
}
