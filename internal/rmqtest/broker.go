// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// consumerExpiry is how long a consumer stays registered without a heartbeat (RocketMQ: 120 s).
	consumerExpiry = 120 * time.Second
	// lockExpiry is how long an ordered consumer's queue lock lasts without renewal (RocketMQ: 60 s).
	lockExpiry = 60 * time.Second
	// maxPullBytes bounds one pull response, as RocketMQ's in-memory transfer limit does.
	maxPullBytes = 256 << 10
	// defaultMaxReconsume is the client's default when a send-back names no limit.
	defaultMaxReconsume = 16
	// sendQueueDepth bounds the sends waiting on one connection before its reader blocks.
	sendQueueDepth = 4096
)

type offsetKey struct {
	group, topic string
	queue        int
}

type mqKey struct {
	Topic      string `json:"topic"`
	BrokerName string `json:"brokerName"`
	QueueID    int    `json:"queueId"`
}

type lockKey struct {
	group string
	mq    mqKey
}

type lockEntry struct {
	clientID string
	until    time.Time
}

// consumerReg is one client registered in a consumer group by its heartbeats.
type consumerReg struct {
	conn     *conn
	lastSeen time.Time
}

type queuedSend struct {
	req *command
	at  time.Time
}

// broker serves the broker port. Its state (consumer offsets, registrations, locks)
// outlives StopBroker/StartBroker; messages live in the Server's store.
type broker struct {
	s      *Server
	wg     sync.WaitGroup
	opaque atomic.Int32
	rr     atomic.Uint32 // round robin for sends that name no queue

	mu       sync.Mutex
	stopping chan struct{}  // closed by StopBroker: held pulls answer at once
	pulls    sync.WaitGroup // held pulls of the current run, counted while stopping is open
	groups   map[string]map[string]*consumerReg
	offsets  map[offsetKey]int64
	locks    map[lockKey]lockEntry
	conns    map[*conn]*connState
	tx       *txState
}

// connState is the broker's per-connection state.
type connState struct {
	sendq chan queuedSend
	// release is closed just before we drop the connection for an injected fault, so
	// that its held pulls answer first: the client would otherwise wait out its 30 s
	// pull timeout, since it does not fail pending requests when a connection closes.
	release chan struct{}
	pulls   sync.WaitGroup // held pulls, counted while release is open
}

func newBroker(s *Server) *broker {
	return &broker{
		s:        s,
		stopping: make(chan struct{}),
		groups:   map[string]map[string]*consumerReg{},
		offsets:  map[offsetKey]int64{},
		locks:    map[lockKey]lockEntry{},
		conns:    map[*conn]*connState{},
		tx:       newTxState(),
	}
}

// wait waits for the broker's goroutines (send workers, suspended pulls, delayed retries).
func (b *broker) wait() { b.wg.Wait() }

func (b *broker) serve(c *conn, req *command) {
	if b.s.aclRefused(c, req) {
		return
	}
	switch req.Code {
	case reqSendMessage, reqSendMessageV2, reqSendBatchMessage:
		b.enqueueSend(c, req)
	case reqPullMessage:
		b.mu.Lock()
		stopping := b.stopping
		cs := b.state(c)
		counted := !isClosed(stopping) && !isClosed(cs.release)
		if counted {
			b.pulls.Add(1)
			cs.pulls.Add(1)
		}
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			if counted {
				defer b.pulls.Done()
				defer cs.pulls.Done()
			}
			b.pull(c, req, stopping, cs.release)
		}()
	case reqHeartBeat:
		b.heartbeat(c, req)
	case reqEndTransaction:
		b.endTransaction(c, req)
	case reqUnregisterClient:
		b.unregister(c, req)
	case reqGetConsumerListByGroup:
		b.consumerList(c, req)
	case reqQueryConsumerOffset:
		b.queryConsumerOffset(c, req)
	case reqQueryMessage:
		b.queryMessage(c, req)
	case reqUpdateConsumerOffset:
		q, _ := strconv.Atoi(req.Ext["queueId"])
		off, _ := strconv.ParseInt(req.Ext["commitOffset"], 10, 64)
		b.setOffset(req.Ext["consumerGroup"], req.Ext["topic"], q, off)
		c.reply(req, newResponse(req, resSuccess, ""))
	case reqGetMaxOffset:
		q, _ := strconv.Atoi(req.Ext["queueId"])
		b.replyOffset(c, req, b.s.store.maxOffset(req.Ext["topic"], q))
	case reqGetMinOffset:
		q, _ := strconv.Atoi(req.Ext["queueId"])
		b.replyOffset(c, req, b.s.store.minOffset(req.Ext["topic"], q))
	case reqGetEarliestMsgStoreTime:
		b.earliestStoreTime(c, req)
	case reqViewMessageByID:
		b.viewMessage(c, req)
	case reqSearchOffsetByTimestamp:
		q, _ := strconv.Atoi(req.Ext["queueId"])
		ts, _ := strconv.ParseInt(req.Ext["timestamp"], 10, 64)
		b.replyOffset(c, req, b.s.store.searchOffset(req.Ext["topic"], q, ts))
	case reqConsumerSendMsgBack:
		b.sendBack(c, req)
	case reqLockBatchMQ:
		b.lockBatch(c, req)
	case reqUpdateAndCreateTopic:
		b.createTopic(c, req)
	case reqUnlockBatchMQ:
		b.unlockBatch(c, req)
	default:
		b.s.logUnknown("broker", req.Code, c.remoteAddr())
		c.reply(req, newResponse(req, resRequestCodeNotSupported, "request code not supported by rmqtest broker"))
	}
}

func (b *broker) closed(c *conn, byPeer bool) {
	b.mu.Lock()
	delete(b.conns, c)
	b.forgetProducerConnLocked(c)
	var changed []string
	if byPeer {
		// The client hung up (it shut down): forget its registrations at once, as
		// RocketMQ does on channel close. When we dropped the connection (a fault or an
		// outage) the client will be back, so its registrations are kept.
		for g, members := range b.groups {
			for id, r := range members {
				if r.conn == c {
					delete(members, id)
					changed = append(changed, g)
				}
			}
		}
	}
	b.mu.Unlock()
	for _, g := range changed {
		b.notifyGroup(g)
	}
}

// queryMessage answers QUERY_MESSAGE as the broker's index does: the messages of topic
// whose unique key (UNIQ_KEY) or one of whose KEYS is key, up to maxNum, in one body; none:
// QUERY_NOT_FOUND.
func (b *broker) queryMessage(c *conn, req *command) {
	max, err := strconv.Atoi(req.Ext["maxNum"])
	if err != nil || req.Ext["topic"] == "" || req.Ext["key"] == "" {
		c.reply(req, newResponse(req, resSystemError, "rmqtest: QUERY_MESSAGE without its required fields"))
		return
	}
	recs := b.s.store.byKey(req.Ext["topic"], req.Ext["key"], max)
	if len(recs) == 0 {
		c.reply(req, newResponse(req, resQueryNotFound, "can not find message, maybe time range not correct"))
		return
	}
	resp := newResponse(req, resSuccess, "")
	for _, r := range recs {
		resp.Body = append(resp.Body, r.wire...)
	}
	resp.Ext["indexLastUpdateTimestamp"] = strconv.FormatInt(recs[len(recs)-1].storeTimestamp, 10)
	resp.Ext["indexLastUpdatePhyoffset"] = strconv.FormatInt(recs[len(recs)-1].physOffset, 10)
	c.reply(req, resp)
}

func (b *broker) replyOffset(c *conn, req *command, off int64) {
	resp := newResponse(req, resSuccess, "")
	resp.Ext["offset"] = strconv.FormatInt(off, 10)
	c.reply(req, resp)
}

// ---- sends ----

// state returns c's state, creating it; b.mu must be held.
func (b *broker) state(c *conn) *connState {
	cs := b.conns[c]
	if cs == nil {
		cs = &connState{release: make(chan struct{})}
		b.conns[c] = cs
	}
	return cs
}

// dropConn closes c for an injected fault, after its held pulls have answered.
func (b *broker) dropConn(c *conn) {
	b.mu.Lock()
	cs := b.conns[c]
	if cs != nil && !isClosed(cs.release) {
		close(cs.release)
	}
	b.mu.Unlock()
	if cs != nil {
		cs.pulls.Wait()
	}
	c.drop()
}

// enqueueSend hands a send to the connection's worker, which handles sends in arrival order.
func (b *broker) enqueueSend(c *conn, req *command) {
	b.mu.Lock()
	var q chan queuedSend
	if !c.isDone() {
		cs := b.state(c)
		if cs.sendq == nil {
			cs.sendq = make(chan queuedSend, sendQueueDepth)
			b.wg.Add(1)
			go b.sendWorker(c, cs.sendq)
		}
		q = cs.sendq
	}
	b.mu.Unlock()
	if q == nil {
		return
	}
	select {
	case q <- queuedSend{req: req, at: time.Now()}:
	case <-c.done:
	}
}

func (b *broker) sendWorker(c *conn, q chan queuedSend) {
	defer b.wg.Done()
	for {
		select {
		case <-c.done:
			return
		case qs := <-q:
			b.handleSend(c, qs)
		}
	}
}

// sendHeader is SendMessageRequestHeader, read from either its long field names
// (SEND_MESSAGE) or the one-letter names of SendMessageRequestHeaderV2.
type sendHeader struct {
	producerGroup  string
	topic          string
	queueID        int
	sysFlag        int32
	bornTimestamp  int64
	flag           int32
	properties     string
	reconsumeTimes int32
	batch          bool
}

func parseSendHeader(ext map[string]string) sendHeader {
	get := func(long, short string) string {
		if v, ok := ext[long]; ok {
			return v
		}
		return ext[short]
	}
	atoi := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	h := sendHeader{
		producerGroup:  get("producerGroup", "a"),
		topic:          get("topic", "b"),
		queueID:        int(atoi(get("queueId", "e"))),
		sysFlag:        int32(atoi(get("sysFlag", "f"))),
		bornTimestamp:  atoi(get("bornTimestamp", "g")),
		flag:           int32(atoi(get("flag", "h"))),
		properties:     get("properties", "i"),
		reconsumeTimes: int32(atoi(get("reconsumeTimes", "j"))),
	}
	h.batch, _ = strconv.ParseBool(get("batch", "m"))
	return h
}

const sysFlagTransactionPrepared = 0x1 << 2

func (b *broker) handleSend(c *conn, qs queuedSend) {
	s := b.s
	req := qs.req
	h := parseSendHeader(req.Ext)
	f := s.faultsFor(h.topic)
	if f.Latency > 0 {
		if wait := time.Until(qs.at.Add(f.Latency)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
		}
	}
	if s.roll(f.DropBeforeStore) {
		b.dropConn(c)
		return
	}
	if s.roll(f.ErrorRate) {
		code := f.ErrorCode
		if code == 0 {
			code = resSystemError
		}
		remark := f.ErrorRemark
		if remark == "" {
			remark = "rmqtest: injected broker error"
		}
		c.reply(req, newResponse(req, code, remark))
		return
	}
	if !s.topicExists(h.topic) {
		c.reply(req, newResponse(req, resTopicNotExist, "topic["+h.topic+"] not exist, apply first please!"))
		return
	}
	recs, code, remark := b.buildRecords(c, req, h)
	if code != resSuccess {
		c.reply(req, newResponse(req, code, remark))
		return
	}
	half := !h.batch && isHalf(recs[0].props)
	realQueue := recs[0].queueID
	if half {
		b.toHalf(recs[0])
	}
	s.store.put(recs)
	if half {
		b.storedHalf(recs[0])
	}
	if s.roll(f.DropAfterStore) {
		b.dropConn(c)
		return
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.offsetMsgID()
	}
	code = resSuccess
	if s.roll(f.Unreplicated) {
		code = f.UnreplicatedCode
		if code == 0 {
			code = resSlaveNotAvailable
		}
	}
	resp := newResponse(req, code, "")
	resp.Ext["msgId"] = strings.Join(ids, ",")
	resp.Ext["queueId"] = strconv.Itoa(int(realQueue))
	resp.Ext["queueOffset"] = strconv.FormatInt(recs[0].queueOffset, 10)
	if half {
		resp.Ext["transactionId"] = parseProperties(recs[0].props)[propUniqKey]
	}
	resp.Ext[propMsgRegion] = "DefaultRegion"
	resp.Ext[propTraceSwitch] = "true"
	c.reply(req, resp)
}

// buildRecords checks a send and turns it into records (one, or one per batch entry).
func (b *broker) buildRecords(c *conn, req *command, h sendHeader) ([]*record, int16, string) {
	s := b.s
	if why := checkTopic(h.topic); why != "" {
		return nil, resSystemError, why
	}
	if !h.batch && isHalf(h.properties) && s.opts.RejectTransactionMessage {
		return nil, resNoPermission, "the broker sending transaction message is forbidden"
	}
	if h.batch && strings.HasPrefix(h.topic, retryTopicPrefix) {
		return nil, resMessageIllegal, "batch request does not support retry group " + h.topic
	}
	nq := s.topic(h.topic)
	qid := h.queueID
	if qid < 0 {
		qid = int(b.rr.Add(1) % uint32(nq))
	}
	if qid >= nq {
		return nil, resSystemError, fmt.Sprintf("request queueId[%d] is illegal, topic %s has %d queues", h.queueID, h.topic, nq)
	}
	now := time.Now().UnixMilli()
	base := record{
		topic:          h.topic,
		queueID:        int32(qid),
		flag:           h.flag,
		sysFlag:        h.sysFlag,
		bornTimestamp:  h.bornTimestamp,
		bornHost:       toHostPort(c.remoteAddr()),
		storeTimestamp: now,
		storeHost:      b.storeHost(),
		reconsumeTimes: h.reconsumeTimes,
		producerGroup:  h.producerGroup,
	}
	if !h.batch {
		if code, why := b.checkSize(len(req.Body), len(h.properties)); code != resSuccess {
			return nil, code, why
		}
		r := base
		r.body = req.Body
		r.props = s.withCluster(h.properties)
		return []*record{&r}, resSuccess, ""
	}
	entries, err := decodeBatch(req.Body)
	if err != nil {
		return nil, resMessageIllegal, err.Error()
	}
	if len(entries) == 0 {
		return nil, resMessageIllegal, "empty batch"
	}
	var outer map[string]string
	if h.properties != "" {
		outer = parseProperties(h.properties)
	}
	// RocketMQ encodes a batch into one buffer of maxMessageSize and fails the whole request
	// with SYSTEM_ERROR when the messages do not fit, whatever each one's size.
	if total := len(req.Body); total > int(s.maxMsgSize.Load()) {
		return nil, resSystemError, "java.lang.RuntimeException: message body size exceeded (rmqtest: batch of " + strconv.Itoa(total) + " bytes)"
	}
	recs := make([]*record, len(entries))
	for i, e := range entries {
		if code, why := b.checkSize(len(e.body), len(e.props)); code != resSuccess {
			return nil, code, why
		}
		r := base
		r.flag = e.flag
		r.body = e.body
		r.props = e.props
		if len(outer) > 0 {
			m := parseProperties(e.props)
			for k, v := range outer {
				if _, ok := m[k]; !ok {
					m[k] = v
				}
			}
			r.props = formatProperties(m)
		}
		r.props = s.withCluster(r.props)
		recs[i] = &r
	}
	return recs, resSuccess, ""
}

func (b *broker) checkSize(body, props int) (int16, string) {
	// RocketMQ 5.3's words for both (DefaultMessageStore's MESSAGE_ILLEGAL).
	if max := int(b.s.maxMsgSize.Load()); body > max || props > 32767 {
		return resMessageIllegal, fmt.Sprintf("the message is illegal, maybe msg body or properties length not matched. msg body length limit %dB, msg properties length limit 32KB.", max)
	}
	return resSuccess, ""
}

func (b *broker) storeHost() hostPort {
	a, err := net.ResolveTCPAddr("tcp", b.s.brokerAddr)
	if err != nil {
		return hostPort{ip: net.IPv4(127, 0, 0, 1).To4()}
	}
	return toHostPort(a)
}

type batchEntry struct {
	flag  int32
	body  []byte
	props string
}

// decodeBatch splits a batch body as the client's MarshalMessageBatch writes it: per
// message int32 total size, int32 magic, int32 body CRC, int32 flag, int32 body
// length + body, int16 properties length + properties.
func decodeBatch(b []byte) ([]batchEntry, error) {
	var out []batchEntry
	for len(b) > 0 {
		if len(b) < 20 {
			return nil, fmt.Errorf("batch entry %d truncated", len(out))
		}
		total := int(binary.BigEndian.Uint32(b))
		if total < 22 || total > len(b) {
			return nil, fmt.Errorf("batch entry %d: bad total size %d", len(out), total)
		}
		m := b[:total]
		flag := int32(binary.BigEndian.Uint32(m[12:]))
		bl := int(binary.BigEndian.Uint32(m[16:]))
		if bl < 0 || 20+bl+2 > total {
			return nil, fmt.Errorf("batch entry %d: bad body length %d", len(out), bl)
		}
		body := m[20 : 20+bl]
		pl := int(binary.BigEndian.Uint16(m[20+bl:]))
		if 22+bl+pl != total {
			return nil, fmt.Errorf("batch entry %d: bad properties length %d", len(out), pl)
		}
		out = append(out, batchEntry{flag: flag, body: body, props: string(m[22+bl:])})
		b = b[total:]
	}
	return out, nil
}

// ---- pulls ----

// stop makes held pulls answer (PULL_NOT_FOUND) and waits for those answers to be
// written, so that consumers see the outage at once rather than after the client's
// 30 s pull timeout; restart re-arms it.
func (b *broker) stop() {
	b.mu.Lock()
	if !isClosed(b.stopping) {
		close(b.stopping)
	}
	b.mu.Unlock()
	b.pulls.Wait()
}

func (b *broker) restart() {
	b.mu.Lock()
	if isClosed(b.stopping) {
		b.stopping = make(chan struct{})
	}
	b.mu.Unlock()
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (b *broker) pull(c *conn, req *command, stopping, release <-chan struct{}) {
	ext := req.Ext
	group, topic := ext["consumerGroup"], ext["topic"]
	qid, _ := strconv.Atoi(ext["queueId"])
	offset, _ := strconv.ParseInt(ext["queueOffset"], 10, 64)
	maxNums, _ := strconv.Atoi(ext["maxMsgNums"])
	sysFlag, _ := strconv.Atoi(ext["sysFlag"])
	commit, _ := strconv.ParseInt(ext["commitOffset"], 10, 64)
	suspendMs, _ := strconv.ParseInt(ext["suspendTimeoutMillis"], 10, 64)
	if maxNums <= 0 {
		maxNums = 32
	}
	if why := checkTopic(topic); why != "" {
		c.reply(req, newResponse(req, resTopicNotExist, why))
		return
	}
	if nq := b.s.topic(topic); qid < 0 || qid >= nq {
		c.reply(req, newResponse(req, resSystemError, fmt.Sprintf("queueId[%d] is illegal, topic %s has %d queues", qid, topic, nq)))
		return
	}
	if sysFlag&0x1 != 0 { // FLAG_COMMIT_OFFSET: the consumer reports its progress
		b.setOffset(group, topic, qid, commit)
	}
	suspend := sysFlag&0x2 != 0 && suspendMs > 0
	deadline := time.Now().Add(time.Duration(suspendMs) * time.Millisecond)
	for {
		res := b.s.store.read(topic, qid, offset, maxNums, maxPullBytes)
		var (
			code = resPullNotFound
			next = offset
		)
		switch {
		case res.maxOffset == 0 && offset != 0:
			next = 0 // the queue is empty: send the consumer back to the start
		case offset < res.minOffset:
			code, next = resPullOffsetMoved, res.minOffset
		case offset > res.maxOffset:
			code, next = resPullOffsetMoved, res.maxOffset
		case len(res.recs) > 0:
			code, next = resSuccess, offset+int64(len(res.recs))
		case suspend && time.Now().Before(deadline) && !isClosed(stopping) && !isClosed(release):
			// Long poll: hold the pull until a message arrives or the suspend time is up.
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-res.signal:
			case <-t.C:
			case <-stopping:
			case <-release:
			case <-c.done:
				t.Stop()
				return
			}
			t.Stop()
			continue
		}
		resp := newResponse(req, code, "")
		resp.Ext["nextBeginOffset"] = strconv.FormatInt(next, 10)
		resp.Ext["minOffset"] = strconv.FormatInt(res.minOffset, 10)
		resp.Ext["maxOffset"] = strconv.FormatInt(res.maxOffset, 10)
		resp.Ext["suggestWhichBrokerId"] = "0"
		if code == resSuccess {
			n := 0
			for _, r := range res.recs {
				n += len(r.wire)
			}
			body := make([]byte, 0, n)
			for _, r := range res.recs {
				body = append(body, r.wire...)
			}
			resp.Body = body
		}
		c.reply(req, resp)
		return
	}
}

// ---- consumer offsets ----

func (b *broker) setOffset(group, topic string, q int, off int64) {
	if group == "" || off < 0 {
		return
	}
	b.mu.Lock()
	b.offsets[offsetKey{group, topic, q}] = off
	b.mu.Unlock()
}

func (b *broker) consumerOffset(group, topic string, q int) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off, ok := b.offsets[offsetKey{group, topic, q}]; ok {
		return off
	}
	return -1
}

// queryConsumerOffset answers a group's committed offset. A group that never committed
// gets 0, as a RocketMQ broker answers while the queue's first message is still in
// memory, so a new group reads the queue from its start.
func (b *broker) queryConsumerOffset(c *conn, req *command) {
	q, _ := strconv.Atoi(req.Ext["queueId"])
	off := b.consumerOffset(req.Ext["consumerGroup"], req.Ext["topic"], q)
	if off < 0 {
		off = 0
	}
	b.replyOffset(c, req, off)
}

// ---- consumer groups ----

type heartbeatBody struct {
	ClientID      string `json:"clientID"`
	ConsumerDatas []struct {
		GroupName     string `json:"groupName"`
		Subscriptions []struct {
			Topic string `json:"topic"`
		} `json:"subscriptionDataSet"`
	} `json:"consumerDataSet"`
}

func (b *broker) heartbeat(c *conn, req *command) {
	var hb heartbeatBody
	if err := json.Unmarshal(req.Body, &hb); err != nil {
		c.reply(req, newResponse(req, resSystemError, "bad heartbeat body: "+err.Error()))
		return
	}
	b.registerProducers(c, hb.ClientID, req.Body)
	now := time.Now()
	var changed []string
	for _, cd := range hb.ConsumerDatas {
		for _, sub := range cd.Subscriptions {
			if checkTopic(sub.Topic) == "" {
				b.s.topic(sub.Topic)
			}
		}
		b.mu.Lock()
		members := b.groups[cd.GroupName]
		if members == nil {
			members = map[string]*consumerReg{}
			b.groups[cd.GroupName] = members
		}
		r, known := members[hb.ClientID]
		if !known {
			r = &consumerReg{}
			members[hb.ClientID] = r
		}
		if !known || r.conn != c {
			changed = append(changed, cd.GroupName)
		}
		r.conn, r.lastSeen = c, now
		b.mu.Unlock()
	}
	c.reply(req, newResponse(req, resSuccess, ""))
	for _, g := range changed {
		b.notifyGroup(g)
	}
}

func (b *broker) unregister(c *conn, req *command) {
	group, id := req.Ext["consumerGroup"], req.Ext["clientID"]
	removed := false
	b.mu.Lock()
	if pg := req.Ext["producerGroup"]; pg != "" {
		b.unregisterProducerLocked(pg, id)
	}
	if members := b.groups[group]; members != nil {
		if _, ok := members[id]; ok {
			delete(members, id)
			removed = true
		}
	}
	b.mu.Unlock()
	c.reply(req, newResponse(req, resSuccess, ""))
	if removed {
		b.notifyGroup(group)
	}
}

// consumerIDs returns the live members of a group, sorted.
func (b *broker) consumerIDs(group string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, r := range b.groups[group] {
		if time.Since(r.lastSeen) > consumerExpiry {
			delete(b.groups[group], id)
			continue
		}
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (b *broker) consumerList(c *conn, req *command) {
	group := req.Ext["consumerGroup"]
	ids := b.consumerIDs(group)
	if len(ids) == 0 {
		c.reply(req, newResponse(req, resSystemError, "no consumer for this group, "+group))
		return
	}
	resp := newResponse(req, resSuccess, "")
	resp.Body, _ = json.Marshal(map[string][]string{"consumerIdList": ids})
	c.reply(req, resp)
}

// notifyGroup tells every member of a group that membership changed, so that they
// rebalance at once (NOTIFY_CONSUMER_IDS_CHANGED, oneway).
func (b *broker) notifyGroup(group string) {
	b.mu.Lock()
	var conns []*conn
	for _, r := range b.groups[group] {
		if !r.conn.isDone() {
			conns = append(conns, r.conn)
		}
	}
	b.mu.Unlock()
	for _, c := range conns {
		cmd := &command{
			Code:    reqNotifyConsumerIdsChange,
			Version: serverVersion,
			Opaque:  b.opaque.Add(1),
			Flag:    flagOneway,
			Ext:     map[string]string{"consumerGroup": group},
		}
		_ = c.write(cmd)
	}
}

// ---- redelivery ----

// sendBack handles CONSUMER_SEND_MSG_BACK (ConsumeRetryLater): the message is stored
// again in %RETRY%group with its reconsume count raised by one, or in %DLQ%group once
// the count reaches the limit. Delay levels are recorded but not waited for; see
// Options.RetryDelay.
func (b *broker) sendBack(c *conn, req *command) {
	ext := req.Ext
	group := ext["group"]
	phys, _ := strconv.ParseInt(ext["offset"], 10, 64)
	delayLevel, _ := strconv.Atoi(ext["delayLevel"])
	maxTimes := defaultMaxReconsume
	if v, err := strconv.Atoi(ext["maxReconsumeTimes"]); err == nil && v >= 0 {
		maxTimes = v
	}
	orig := b.s.store.lookup(phys)
	if orig == nil {
		c.reply(req, newResponse(req, resSystemError, fmt.Sprintf("look message by offset failed, %d", phys)))
		return
	}
	props := parseProperties(orig.props)
	if props[propRetryTopic] == "" {
		props[propRetryTopic] = orig.topic
	}
	if props[propOriginMsgID] == "" {
		if id := ext["originMsgId"]; id != "" {
			props[propOriginMsgID] = id
		} else {
			props[propOriginMsgID] = orig.offsetMsgID()
		}
	}
	delete(props, propDelay)
	props[propWait] = "false"
	topic := retryTopicPrefix + group
	dlq := int(orig.reconsumeTimes) >= maxTimes || delayLevel < 0
	if dlq {
		topic = dlqTopicPrefix + group
	}
	b.s.topic(topic)
	r := &record{
		topic:          topic,
		queueID:        0,
		flag:           orig.flag,
		sysFlag:        orig.sysFlag,
		body:           orig.body,
		props:          formatProperties(props),
		bornTimestamp:  orig.bornTimestamp,
		bornHost:       orig.bornHost,
		storeHost:      b.storeHost(),
		reconsumeTimes: orig.reconsumeTimes + 1,
	}
	if !dlq {
		r.delayLevel = delayLevel
		if r.delayLevel == 0 {
			r.delayLevel = 3 + int(orig.reconsumeTimes) // RocketMQ's schedule: 10s, 30s, 1m, ...
		}
	}
	if delay := b.s.opts.RetryDelay; delay > 0 && !dlq {
		b.wg.Add(1)
		time.AfterFunc(delay, func() {
			defer b.wg.Done()
			r.storeTimestamp = time.Now().UnixMilli()
			b.s.store.put([]*record{r})
		})
	} else {
		r.storeTimestamp = time.Now().UnixMilli()
		b.s.store.put([]*record{r})
	}
	c.reply(req, newResponse(req, resSuccess, ""))
}

// ---- ordered consumption locks ----

type lockBody struct {
	ConsumerGroup string  `json:"consumerGroup"`
	ClientID      string  `json:"clientId"`
	MQs           []mqKey `json:"mqSet"`
}

func (b *broker) lockBatch(c *conn, req *command) {
	var body lockBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		c.reply(req, newResponse(req, resSystemError, "bad lock body: "+err.Error()))
		return
	}
	now := time.Now()
	locked := []mqKey{}
	b.mu.Lock()
	for _, mq := range body.MQs {
		k := lockKey{body.ConsumerGroup, mq}
		if e, ok := b.locks[k]; ok && e.clientID != body.ClientID && now.Before(e.until) {
			continue
		}
		b.locks[k] = lockEntry{clientID: body.ClientID, until: now.Add(lockExpiry)}
		locked = append(locked, mq)
	}
	b.mu.Unlock()
	resp := newResponse(req, resSuccess, "")
	resp.Body, _ = json.Marshal(map[string][]mqKey{"lockOKMQSet": locked})
	c.reply(req, resp)
}

func (b *broker) unlockBatch(c *conn, req *command) {
	var body lockBody
	if err := json.Unmarshal(req.Body, &body); err != nil {
		c.reply(req, newResponse(req, resSystemError, "bad unlock body: "+err.Error()))
		return
	}
	b.mu.Lock()
	for _, mq := range body.MQs {
		k := lockKey{body.ConsumerGroup, mq}
		if e, ok := b.locks[k]; ok && e.clientID == body.ClientID {
			delete(b.locks, k)
		}
	}
	b.mu.Unlock()
	c.reply(req, newResponse(req, resSuccess, ""))
}
