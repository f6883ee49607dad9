// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Transactional messages as Apache RocketMQ 5.3 handles them: a send whose TRAN_MSG
// property is "true" is a half, stored invisible in RMQ_SYS_TRANS_HALF_TOPIC with its real
// topic and queue in REAL_TOPIC/REAL_QID; END_TRANSACTION commits it (the real message is
// stored) or rolls it back; a half left unresolved longer than TransactionTimeout is
// checked back with a producer of its PGROUP, each check raising TRANSACTION_CHECK_TIMES
// and appending a new copy of the half, until TransactionCheckMax checks have been spent
// and the half is written to TRANS_CHECK_MAX_TIME_TOPIC, never delivered.
const (
	reqEndTransaction          int16 = 37
	reqCheckTransactionState   int16 = 39
	halfTopic                        = "RMQ_SYS_TRANS_HALF_TOPIC"
	checkMaxTopic                    = "TRANS_CHECK_MAX_TIME_TOPIC"
	propTransactionID                = "__transactionId__"
	propCheckTimes                   = "TRANSACTION_CHECK_TIMES"
	propPreparedQueueOffset          = "TRAN_PREPARED_QUEUE_OFFSET"
	sysFlagTransactionTypes    int32 = 0xC // MessageSysFlag's TRANSACTION_* bits
	sysFlagTransactionCommit   int32 = 0x8
	sysFlagTransactionRoll     int32 = 0xC
	opBatchWindow                    = 3 * time.Second // transactionOpBatchInterval
	defaultTransactionTimeout        = 6 * time.Second
	defaultTransactionCheckMax       = 15
)

// Resolution is what became of a transaction's half.
type Resolution string

// The resolutions of a half message.
const (
	// Pending is a half neither committed nor rolled back (or one never sent).
	Pending Resolution = ""
	// Committed is a half whose real message was stored by a COMMIT.
	Committed Resolution = "commit"
	// RolledBack is a half discarded by a ROLLBACK.
	RolledBack Resolution = "rollback"
	// Discarded is a half checked TransactionCheckMax times without an answer, written to
	// TRANS_CHECK_MAX_TIME_TOPIC.
	Discarded Resolution = "discarded"
)

// TxFaults describes failures injected into transactional messages. Rates are fractions
// in [0, 1].
type TxFaults struct {
	// DropEndTransaction is the fraction of END_TRANSACTION requests ignored: not
	// applied, not answered (a lost END; the half stays and is checked).
	DropEndTransaction float64
	// EndTransactionErrorRate is the fraction of END_TRANSACTION requests answered
	// SYSTEM_ERROR without being applied.
	EndTransactionErrorRate float64
	// DropChecks is the fraction of check-backs not sent although counted, as a check
	// lost on a busy channel is.
	DropChecks float64
	// LoseOpsOnStop makes StopBroker forget the resolutions recorded in the last 3 s
	// (RocketMQ batches its op records every 3 s), so those halves are checked again.
	LoseOpsOnStop bool
}

// txn is one transaction: its half and every copy appended by checks.
type txn struct {
	uniq     string
	group    string
	latest   *record // the copy a check would present
	bornAt   int64
	checks   int
	state    Resolution
	opAt     time.Time
	commits  int
	lastSeen time.Time // when the half (or its latest copy) was stored
}

// producerReg is a producer registered by heartbeat for check-backs.
type producerReg struct {
	conn     *conn
	lastSeen time.Time
}

// txState is the broker's transactional state; it outlives StopBroker/StartBroker as the
// store does.
type txState struct {
	byPhys    map[int64]*txn
	all       []*txn
	producers map[string]map[string]*producerReg // group -> client id
	rr        uint32
	checks    int
	ends      int
	faults    TxFaults
}

func newTxState() *txState {
	return &txState{byPhys: map[int64]*txn{}, producers: map[string]map[string]*producerReg{}}
}

// isHalf reports whether a send is a half: RocketMQ 5.3 goes by the TRAN_MSG property.
func isHalf(props string) bool {
	v, _ := strconv.ParseBool(parseProperties(props)[propTransaction])
	return v
}

// toHalf turns a built record into the stored half.
func (b *broker) toHalf(r *record) {
	props := parseProperties(r.props)
	props[propRealTopic] = r.topic
	props[propRealQueueID] = strconv.Itoa(int(r.queueID))
	if u := props[propUniqKey]; u != "" {
		props[propTransactionID] = u
	}
	r.props = formatProperties(props)
	r.topic = halfTopic
	r.queueID = 0
	r.sysFlag &^= sysFlagTransactionTypes
	b.s.store.ensureTopic(halfTopic, 1)
}

// storedHalf records a stored half as a new transaction.
func (b *broker) storedHalf(r *record) {
	props := parseProperties(r.props)
	t := &txn{uniq: props[propUniqKey], group: props[propPGroup], latest: r, bornAt: r.bornTimestamp, lastSeen: time.Now()}
	b.mu.Lock()
	b.tx.byPhys[r.physOffset] = t
	b.tx.all = append(b.tx.all, t)
	b.mu.Unlock()
}

// endTransaction handles END_TRANSACTION as EndTransactionProcessor does: the half is
// found by commitLogOffset and must match the producer group and the state table offset;
// COMMIT stores the real message, ROLLBACK records the resolution, UNKNOWN (0) is ignored.
// No fence: a second valid COMMIT stores a second copy.
func (b *broker) endTransaction(c *conn, req *command) {
	b.mu.Lock()
	f := b.tx.faults
	b.tx.ends++
	b.mu.Unlock()
	if b.s.roll(f.DropEndTransaction) {
		return
	}
	if b.s.roll(f.EndTransactionErrorRate) {
		c.reply(req, newResponse(req, resSystemError, "rmqtest: injected end transaction error"))
		return
	}
	ext := req.Ext
	kind, _ := strconv.Atoi(ext["commitOrRollback"])
	if int32(kind) != sysFlagTransactionCommit && int32(kind) != sysFlagTransactionRoll {
		return // NOT_TYPE: the producer does not know yet; RocketMQ answers nothing
	}
	phys, err1 := strconv.ParseInt(ext["commitLogOffset"], 10, 64)
	qoff, err2 := strconv.ParseInt(ext["tranStateTableOffset"], 10, 64)
	if err1 != nil || err2 != nil || ext["producerGroup"] == "" || ext["msgId"] == "" {
		c.reply(req, newResponse(req, resSystemError, "rmqtest: END_TRANSACTION without its required fields"))
		return
	}
	r := b.s.store.lookup(phys)
	b.mu.Lock()
	t := b.tx.byPhys[phys]
	b.mu.Unlock()
	if r == nil || t == nil {
		c.reply(req, newResponse(req, resSystemError, "Find prepared transaction message failed"))
		return
	}
	props := parseProperties(r.props)
	switch {
	case props[propPGroup] != ext["producerGroup"]:
		c.reply(req, newResponse(req, resSystemError, "The producer group wrong"))
		return
	case r.queueOffset != qoff:
		c.reply(req, newResponse(req, resSystemError, "The transaction state table offset wrong"))
		return
	}
	if int32(kind) == sysFlagTransactionCommit {
		real := *r
		real.topic = props[propRealTopic]
		q, _ := strconv.Atoi(props[propRealQueueID])
		real.queueID = int32(q)
		for _, k := range []string{propTransaction, propRealTopic, propRealQueueID, propCheckTimes, propPreparedQueueOffset} {
			delete(props, k)
		}
		real.props = formatProperties(props)
		real.sysFlag = r.sysFlag&^sysFlagTransactionTypes | sysFlagTransactionCommit
		real.storeTimestamp = time.Now().UnixMilli()
		real.wire = nil
		b.s.topic(real.topic)
		b.s.store.put([]*record{&real})
	}
	b.mu.Lock()
	if int32(kind) == sysFlagTransactionCommit {
		t.commits++
		t.state = Committed
	} else if t.state != Committed {
		t.state = RolledBack
	}
	t.opAt = time.Now()
	b.mu.Unlock()
	c.reply(req, newResponse(req, resSuccess, ""))
}

// registerProducers records the producer groups of a heartbeat.
func (b *broker) registerProducers(c *conn, clientID string, body []byte) {
	var hb struct {
		ProducerDatas []struct {
			GroupName string `json:"groupName"`
		} `json:"producerDataSet"`
	}
	if json.Unmarshal(body, &hb) != nil {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pd := range hb.ProducerDatas {
		m := b.tx.producers[pd.GroupName]
		if m == nil {
			m = map[string]*producerReg{}
			b.tx.producers[pd.GroupName] = m
		}
		m[clientID] = &producerReg{conn: c, lastSeen: now}
	}
}

// unregisterProducer handles the producerGroup of UNREGISTER_CLIENT; b.mu must be held.
func (b *broker) unregisterProducerLocked(group, clientID string) {
	if m := b.tx.producers[group]; m != nil {
		delete(m, clientID)
	}
}

// forgetProducerConn drops the registrations of a closed connection (RocketMQ does it on
// channel close); b.mu must be held.
func (b *broker) forgetProducerConnLocked(c *conn) {
	for _, m := range b.tx.producers {
		for id, r := range m {
			if r.conn == c {
				delete(m, id)
			}
		}
	}
}

// producerIDs returns the live producers of a group, sorted.
func (b *broker) producerIDs(group string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ids []string
	for id, r := range b.tx.producers[group] {
		if time.Since(r.lastSeen) <= consumerExpiry && !r.conn.isDone() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// channelFor picks a producer of group round robin, as ProducerManager.getAvailableChannel
// does (the sender is not preferred); b.mu must be held.
func (b *broker) channelForLocked(group string) *conn {
	var live []*conn
	ids := make([]string, 0, len(b.tx.producers[group]))
	for id := range b.tx.producers[group] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := b.tx.producers[group][id]
		if time.Since(r.lastSeen) <= consumerExpiry && !r.conn.isDone() {
			live = append(live, r.conn)
		}
	}
	if len(live) == 0 {
		return nil
	}
	b.tx.rr++
	return live[int(b.tx.rr)%len(live)]
}

// checkRound walks the unresolved halves once, as TransactionalMessageServiceImpl.check
// does, and returns the number of checks sent. A half older than TransactionTimeout (or
// born in the future by the producer's clock) gets its count raised first; past
// TransactionCheckMax it is discarded, else a copy carrying the count is appended and a
// check with the copy's offsets goes to a producer of its group, if one is registered.
func (b *broker) checkRound() int {
	if !b.s.BrokerRunning() {
		return 0
	}
	timeout, max := b.s.opts.TransactionTimeout, b.s.opts.TransactionCheckMax
	now := time.Now()
	due, f := b.dueHalves(now, timeout)
	sent := 0
	for _, t := range due {
		if b.checkHalf(t, now, max, f) {
			sent++
		}
	}
	return sent
}

// dueHalves returns the pending halves older than timeout at now, or born in the future,
// and the faults in force for this round.
func (b *broker) dueHalves(now time.Time, timeout time.Duration) ([]*txn, TxFaults) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var due []*txn
	for _, t := range b.tx.all {
		if t.state != Pending {
			continue
		}
		age := now.UnixMilli() - t.bornAt
		if age >= timeout.Milliseconds() || age <= -1 {
			due = append(due, t)
		}
	}
	return due, b.tx.faults
}

// checkHalf raises t's check count; past max it moves the half to the check-max topic and
// discards it, else it appends a copy carrying the count and sends a check for the copy to a
// producer of t's group. It reports whether a check was sent.
func (b *broker) checkHalf(t *txn, now time.Time, max int, f TxFaults) bool {
	b.mu.Lock()
	t.checks++
	n := t.checks
	old := t.latest
	b.mu.Unlock()
	props := parseProperties(old.props)
	props[propCheckTimes] = strconv.Itoa(n)
	if n > max {
		d := *old
		d.topic, d.queueID, d.wire = checkMaxTopic, 0, nil
		d.props = formatProperties(props)
		b.s.store.ensureTopic(checkMaxTopic, 1)
		b.s.store.put([]*record{&d})
		b.mu.Lock()
		t.state = Discarded
		b.mu.Unlock()
		return false
	}
	if _, ok := props[propPreparedQueueOffset]; !ok {
		props[propPreparedQueueOffset] = strconv.FormatInt(old.queueOffset, 10)
	}
	cp := *old
	cp.props = formatProperties(props)
	cp.storeTimestamp = now.UnixMilli()
	cp.wire = nil
	b.s.store.put([]*record{&cp})
	b.mu.Lock()
	t.latest = &cp
	t.lastSeen = now
	b.tx.byPhys[cp.physOffset] = t
	c := b.channelForLocked(t.group)
	b.mu.Unlock()
	if c == nil || b.s.roll(f.DropChecks) {
		return false // "channel is null": the check is lost, its count spent
	}
	if c.write(b.checkCommand(t, &cp, props)) != nil {
		return false
	}
	b.mu.Lock()
	b.tx.checks++
	b.mu.Unlock()
	return true
}

// checkCommand is the one-way CHECK_TRANSACTION_STATE for the half's latest copy cp (with
// its properties props); it carries the message as the producer sent it: real topic and
// queue.
func (b *broker) checkCommand(t *txn, cp *record, props map[string]string) *command {
	msg := *cp
	msg.topic = props[propRealTopic]
	q, _ := strconv.Atoi(props[propRealQueueID])
	msg.queueID = int32(q)
	return &command{
		Code:    reqCheckTransactionState,
		Version: serverVersion,
		Opaque:  b.opaque.Add(1),
		Flag:    flagOneway,
		Ext: map[string]string{
			"topic":                msg.topic,
			"tranStateTableOffset": strconv.FormatInt(cp.queueOffset, 10),
			"commitLogOffset":      strconv.FormatInt(cp.physOffset, 10),
			"msgId":                t.uniq,
			"transactionId":        t.uniq,
			"offsetMsgId":          cp.offsetMsgID(),
			"bname":                b.s.opts.BrokerName,
		},
		Body: msg.encode(),
	}
}

// loseRecentOps forgets resolutions recorded within the op batch window (LoseOpsOnStop).
func (b *broker) loseRecentOps() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.tx.faults.LoseOpsOnStop {
		return
	}
	for _, t := range b.tx.all {
		if t.state == Committed || t.state == RolledBack {
			if time.Since(t.opAt) < opBatchWindow {
				t.state = Pending
			}
		}
	}
}

// checkLoop runs check rounds every TransactionCheckInterval until stop is closed.
func (b *broker) checkLoop(every time.Duration, stop <-chan struct{}) {
	defer b.wg.Done()
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			b.checkRound()
		}
	}
}

// SetTxFaults sets the faults injected into transactional messages.
func (s *Server) SetTxFaults(f TxFaults) {
	s.broker.mu.Lock()
	s.broker.tx.faults = f
	s.broker.mu.Unlock()
}

// TriggerCheck runs one check round now and returns the number of checks sent.
func (s *Server) TriggerCheck() int { return s.broker.checkRound() }

// Producers returns the client ids registered (by heartbeat) in a producer group and
// reachable for check-backs.
func (s *Server) Producers(group string) []string { return s.broker.producerIDs(group) }

// ChecksSent returns the number of check-backs written to producers so far.
func (s *Server) ChecksSent() int {
	s.broker.mu.Lock()
	defer s.broker.mu.Unlock()
	return s.broker.tx.checks
}

// EndTransactions returns the number of END_TRANSACTION requests received, dropped ones included.
func (s *Server) EndTransactions() int {
	s.broker.mu.Lock()
	defer s.broker.mu.Unlock()
	return s.broker.tx.ends
}

// HalfState describes one transaction's half.
type HalfState struct {
	// UniqKey is the client's message id (UNIQ_KEY), the transaction id.
	UniqKey string
	// ProducerGroup is the PGROUP the half names.
	ProducerGroup string
	// Resolution is what became of it.
	Resolution Resolution
	// Checks is its TRANSACTION_CHECK_TIMES.
	Checks int
	// Commits counts the COMMITs applied (more than one stores duplicates).
	Commits int
}

// Halves returns every transaction's state, in send order.
func (s *Server) Halves() []HalfState {
	s.broker.mu.Lock()
	defer s.broker.mu.Unlock()
	out := make([]HalfState, 0, len(s.broker.tx.all))
	for _, t := range s.broker.tx.all {
		out = append(out, HalfState{UniqKey: t.uniq, ProducerGroup: t.group, Resolution: t.state, Checks: t.checks, Commits: t.commits})
	}
	return out
}

// Half returns the state of the transaction whose UNIQ_KEY is uniq (or whose OUTBOX_MSG_ID
// property is uniq), and whether there is one.
func (s *Server) Half(uniq string) (HalfState, bool) {
	s.broker.mu.Lock()
	var found *txn
	for _, t := range s.broker.tx.all {
		if t.uniq == uniq || parseProperties(t.latest.props)["OUTBOX_MSG_ID"] == uniq {
			found = t
		}
	}
	s.broker.mu.Unlock()
	if found == nil {
		return HalfState{}, false
	}
	for _, h := range s.Halves() {
		if h.UniqKey == found.uniq {
			return h, true
		}
	}
	return HalfState{}, false
}

func (t *txn) String() string { return fmt.Sprintf("%s(%s, %d checks)", t.uniq, t.state, t.checks) }

// BrokerName returns the broker's name, as routes and cluster info name it.
func (s *Server) BrokerName() string { return s.opts.BrokerName }
