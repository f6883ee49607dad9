// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"io"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// Property names and flags of RocketMQ's message format that the broker itself reads or writes.
const (
	propKeys           = "KEYS"
	propTags           = "TAGS"
	propDelay          = "DELAY"
	propRetryTopic     = "RETRY_TOPIC"
	propOriginMsgID    = "ORIGIN_MESSAGE_ID"
	propUniqKey        = "UNIQ_KEY"
	propMaxReconsume   = "MAX_RECONSUME_TIMES"
	propWait           = "WAIT"
	propTransaction    = "TRAN_MSG"
	propPGroup         = "PGROUP"
	propConsumeStart   = "CONSUME_START_TIME"
	propMinOffset      = "MIN_OFFSET"
	propMaxOffset      = "MAX_OFFSET"
	propShardingKey    = "SHARDING_KEY"
	propRealTopic      = "REAL_TOPIC"
	propRealQueueID    = "REAL_QID"
	propReconsumeTime  = "RECONSUME_TIME"
	propTraceSwitch    = "TRACE_ON"
	propMsgRegion      = "MSG_REGION"
	propCluster        = "CLUSTER"
	nameValueSeparator = '\001'
	propertySeparator  = '\002'

	sysFlagCompressed  int32 = 0x1
	sysFlagBornHostV6  int32 = 0x1 << 4
	sysFlagStoreHostV6 int32 = 0x1 << 5

	messageMagicCode uint32 = 0xDAA320A7 // RocketMQ's MESSAGE_MAGIC_CODE (-626843481)
)

// systemProperties are the properties RocketMQ clients and brokers set themselves;
// Message.UserProperties leaves them out.
var systemProperties = map[string]bool{
	propKeys: true, propTags: true, propDelay: true, propRetryTopic: true, propOriginMsgID: true,
	propUniqKey: true, propMaxReconsume: true, propWait: true, propTransaction: true, propPGroup: true,
	propConsumeStart: true, propMinOffset: true, propMaxOffset: true, propShardingKey: true,
	propRealTopic: true, propRealQueueID: true, propReconsumeTime: true, propTraceSwitch: true,
	propMsgRegion: true, propCluster: true,
}

// record is one stored message, kept with its wire encoding for pulls.
type record struct {
	topic          string
	queueID        int32
	queueOffset    int64
	physOffset     int64
	flag           int32
	sysFlag        int32
	body           []byte // as received (compressed when sysFlag says so)
	props          string // RocketMQ property string
	bornTimestamp  int64
	bornHost       hostPort
	storeTimestamp int64
	storeHost      hostPort
	reconsumeTimes int32
	producerGroup  string
	delayLevel     int // for redeliveries, whose DELAY property is cleared as RocketMQ does
	wire           []byte
}

type hostPort struct {
	ip   net.IP // 4 or 16 bytes
	port int32
}

func toHostPort(a net.Addr) hostPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip4 := ta.IP.To4(); ip4 != nil {
			return hostPort{ip: ip4, port: int32(ta.Port)}
		}
		return hostPort{ip: ta.IP.To16(), port: int32(ta.Port)}
	}
	return hostPort{ip: net.IPv4(127, 0, 0, 1).To4()}
}

func (h hostPort) v6() bool { return len(h.ip) == net.IPv6len }

// offsetMsgID is the broker-assigned message id: store host, port and commit log offset, in hex.
func (r *record) offsetMsgID() string {
	b := make([]byte, 0, 28)
	b = append(b, r.storeHost.ip...)
	b = binary.BigEndian.AppendUint32(b, uint32(r.storeHost.port))
	b = binary.BigEndian.AppendUint64(b, uint64(r.physOffset))
	return strings.ToUpper(hex.EncodeToString(b))
}

// encode builds the message as a broker stores and serves it (the layout
// primitive.DecodeMessage reads).
func (r *record) encode() []byte {
	sysFlag := r.sysFlag &^ (sysFlagBornHostV6 | sysFlagStoreHostV6)
	if r.bornHost.v6() {
		sysFlag |= sysFlagBornHostV6
	}
	if r.storeHost.v6() {
		sysFlag |= sysFlagStoreHostV6
	}
	size := 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + len(r.bornHost.ip) + 4 + 8 + len(r.storeHost.ip) + 4 + 4 + 8 +
		4 + len(r.body) + 1 + len(r.topic) + 2 + len(r.props)
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint32(b, uint32(size))
	b = binary.BigEndian.AppendUint32(b, messageMagicCode)
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(r.body)&0x7FFFFFFF)
	b = binary.BigEndian.AppendUint32(b, uint32(r.queueID))
	b = binary.BigEndian.AppendUint32(b, uint32(r.flag))
	b = binary.BigEndian.AppendUint64(b, uint64(r.queueOffset))
	b = binary.BigEndian.AppendUint64(b, uint64(r.physOffset))
	b = binary.BigEndian.AppendUint32(b, uint32(sysFlag))
	b = binary.BigEndian.AppendUint64(b, uint64(r.bornTimestamp))
	b = append(b, r.bornHost.ip...)
	b = binary.BigEndian.AppendUint32(b, uint32(r.bornHost.port))
	b = binary.BigEndian.AppendUint64(b, uint64(r.storeTimestamp))
	b = append(b, r.storeHost.ip...)
	b = binary.BigEndian.AppendUint32(b, uint32(r.storeHost.port))
	b = binary.BigEndian.AppendUint32(b, uint32(r.reconsumeTimes))
	b = binary.BigEndian.AppendUint64(b, 0) // prepared transaction offset
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.body)))
	b = append(b, r.body...)
	b = append(b, byte(len(r.topic)))
	b = append(b, r.topic...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(r.props)))
	return append(b, r.props...)
}

// message converts a record into the public inspection form.
func (r *record) message() Message {
	props := parseProperties(r.props)
	body := r.body
	if r.sysFlag&sysFlagCompressed != 0 {
		if u, err := uncompress(body); err == nil {
			body = u
		}
	}
	m := Message{
		Topic:           r.topic,
		QueueID:         int(r.queueID),
		QueueOffset:     r.queueOffset,
		CommitLogOffset: r.physOffset,
		Tags:            props[propTags],
		Keys:            strings.Fields(props[propKeys]),
		Body:            append([]byte(nil), body...),
		Properties:      props,
		ReconsumeTimes:  int(r.reconsumeTimes),
		Flag:            r.flag,
		SysFlag:         r.sysFlag,
		OffsetMsgID:     r.offsetMsgID(),
		BornTimestamp:   r.bornTimestamp,
		StoreTimestamp:  r.storeTimestamp,
		ProducerGroup:   r.producerGroup,
	}
	m.MsgID = props[propUniqKey]
	if m.MsgID == "" {
		m.MsgID = m.OffsetMsgID
	}
	m.DelayLevel = r.delayLevel
	if d, err := strconv.Atoi(props[propDelay]); err == nil && m.DelayLevel == 0 {
		m.DelayLevel = d
	}
	return m
}

func uncompress(b []byte) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	return io.ReadAll(zr)
}

// parseProperties splits a RocketMQ property string (name \001 value \002 ...).
func parseProperties(s string) map[string]string {
	m := map[string]string{}
	for _, item := range strings.Split(s, string(propertySeparator)) {
		if k, v, ok := strings.Cut(item, string(nameValueSeparator)); ok && !strings.ContainsRune(v, nameValueSeparator) {
			m[k] = v
		}
	}
	return m
}

// formatProperties is the inverse of parseProperties, in sorted key order.
func formatProperties(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(nameValueSeparator)
		b.WriteString(m[k])
		b.WriteByte(propertySeparator)
	}
	return b.String()
}

// queue is one message queue of a topic: an append-only log with a wake-up channel
// for suspended pulls.
type queue struct {
	recs   []*record
	base   int64         // the queue offset of recs[0]: above 0 once the head was dropped (loss.go)
	signal chan struct{} // closed and replaced on every append
}

type topicData struct {
	queues []*queue
}

// store is the broker's in-memory message store.
type store struct {
	mu       sync.Mutex
	topics   map[string]*topicData
	byPhys   map[int64]*record
	nextPhys int64
	order    []*record     // every record in store order
	changed  chan struct{} // closed and replaced on every append, for WaitMessages
}

func newStore() *store {
	return &store{topics: map[string]*topicData{}, byPhys: map[int64]*record{}, changed: make(chan struct{})}
}

// ensureTopic returns the topic, creating it with n queues if new.
func (s *store) ensureTopic(name string, n int) *topicData {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ensureTopicLocked(name, n)
}

func (s *store) ensureTopicLocked(name string, n int) *topicData {
	t := s.topics[name]
	if t == nil {
		t = &topicData{queues: make([]*queue, n)}
		for i := range t.queues {
			t.queues[i] = &queue{signal: make(chan struct{})}
		}
		s.topics[name] = t
	}
	return t
}

func (s *store) queueCount(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.topics[name]; t != nil {
		return len(t.queues)
	}
	return 0
}

// put appends records (all of one topic and queue, as a batch is) and assigns their
// offsets; the topic must exist and queueID be valid.
func (s *store) put(recs []*record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		q := s.topics[r.topic].queues[r.queueID]
		r.queueOffset = q.base + int64(len(q.recs))
		r.physOffset = s.nextPhys
		r.wire = r.encode()
		s.nextPhys += int64(len(r.wire))
		q.recs = append(q.recs, r)
		s.byPhys[r.physOffset] = r
		s.order = append(s.order, r)
		close(q.signal)
		q.signal = make(chan struct{})
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// pullResult is what a read of one queue found.
type pullResult struct {
	recs      []*record
	minOffset int64
	maxOffset int64
	exists    bool
	signal    <-chan struct{}
}

// read returns up to max records from offset, stopping after maxBytes (but always
// returning at least one record when one is there).
func (s *store) read(topic string, queueID int, offset int64, max, maxBytes int) pullResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil || queueID < 0 || queueID >= len(t.queues) {
		return pullResult{}
	}
	q := t.queues[queueID]
	res := pullResult{minOffset: q.base, maxOffset: q.base + int64(len(q.recs)), exists: true, signal: q.signal}
	size := 0
	for o := offset - q.base; o >= 0 && o < int64(len(q.recs)) && len(res.recs) < max; o++ {
		r := q.recs[o]
		if len(res.recs) > 0 && size+len(r.wire) > maxBytes {
			break
		}
		size += len(r.wire)
		res.recs = append(res.recs, r)
	}
	return res
}

func (s *store) maxOffset(topic string, queueID int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.topics[topic]; t != nil && queueID >= 0 && queueID < len(t.queues) {
		return t.queues[queueID].base + int64(len(t.queues[queueID].recs))
	}
	return 0
}

// searchOffset returns the first offset whose store time is at or after ts (the max offset if none).
func (s *store) searchOffset(topic string, queueID int, ts int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil || queueID < 0 || queueID >= len(t.queues) {
		return 0
	}
	q := t.queues[queueID]
	return q.base + int64(sort.Search(len(q.recs), func(i int) bool { return q.recs[i].storeTimestamp >= ts }))
}

// byKey returns up to max records of topic whose UNIQ_KEY is key or whose KEYS include it.
func (s *store) byKey(topic, key string, max int) []*record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*record
	for _, r := range s.order {
		if len(out) >= max {
			break
		}
		if r.topic != topic {
			continue
		}
		props := parseProperties(r.props)
		if props[propUniqKey] == key || slices.Contains(strings.Fields(props[propKeys]), key) {
			out = append(out, r)
		}
	}
	return out
}

func (s *store) lookup(phys int64) *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byPhys[phys]
}

// messages returns the topic's messages in store order (queue < 0) or one queue's.
func (s *store) messages(topic string, queueID int) []Message {
	s.mu.Lock()
	var recs []*record
	if queueID < 0 {
		for _, r := range s.order {
			if r.topic == topic {
				recs = append(recs, r)
			}
		}
	} else if t := s.topics[topic]; t != nil && queueID < len(t.queues) {
		recs = append(recs, t.queues[queueID].recs...)
	}
	s.mu.Unlock()
	out := make([]Message, len(recs))
	for i, r := range recs {
		out[i] = r.message()
	}
	return out
}

// count returns the number of stored messages of topic and a channel closed at the next append.
func (s *store) count(topic string) (int, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	if t := s.topics[topic]; t != nil {
		for _, q := range t.queues {
			n += len(q.recs)
		}
	}
	return n, s.changed
}
