// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// Options configures a Server. The zero value is usable: every field has a default.
type Options struct {
	// NameServerAddr is the name server's listen address. Defaults to "127.0.0.1:0" (a port chosen by the OS).
	NameServerAddr string
	// BrokerAddr is the broker's listen address. Defaults to "127.0.0.1:0"; the port
	// chosen at Start is kept across StopBroker/StartBroker.
	BrokerAddr string
	// BrokerName is the broker name clients see in routes. Defaults to "broker-a".
	BrokerName string
	// ClusterName is the cluster name clients see in routes. Defaults to "DefaultCluster".
	ClusterName string
	// Topics, when not empty, are the only topics that exist, as on a broker with
	// autoCreateTopicEnable=false: the name server answers TOPIC_NOT_EXIST (17) for any other
	// topic and the broker refuses sends to it with the same code. Retry and dead-letter
	// topics always exist. Defaults to none: every valid topic is created on first use.
	Topics []string
	// Queues is the number of queues of an auto-created topic. Defaults to 4.
	// Retry and dead-letter topics (%RETRY%group, %DLQ%group) get one queue, as in RocketMQ.
	Queues int
	// MaxMessageSize is the largest body (after client compression) the broker accepts;
	// larger sends get a MESSAGE_ILLEGAL (13) response, as RocketMQ's size check does.
	// Defaults to 4 MiB, RocketMQ's default.
	MaxMessageSize int
	// NoAutoCreateTopics makes the broker behave as RocketMQ's with
	// autoCreateTopicEnable=false and no Topics listed: a topic exists only once CreateTopic
	// (or the client's admin API) created it.
	NoAutoCreateTopics bool
	// RetryDelay is how long a message sent back by a consumer (ConsumeRetryLater)
	// waits before it is stored in %RETRY%group and redelivered. RocketMQ's delay levels
	// (10s, 30s, 1m, ...) are not honoured. Defaults to 0: redelivery at once.
	RetryDelay time.Duration
	// TransactionTimeout is how old a half must be (by its born time) before it is checked
	// back. Defaults to 6 s, RocketMQ's transactionTimeOut.
	TransactionTimeout time.Duration
	// TransactionCheckInterval runs a check round this often. Defaults to 0: no automatic
	// rounds, only TriggerCheck (RocketMQ's transactionCheckInterval is 30 s).
	TransactionCheckInterval time.Duration
	// TransactionCheckMax is the number of checks after which an unresolved half is
	// discarded to TRANS_CHECK_MAX_TIME_TOPIC. Defaults to 15, RocketMQ's transactionCheckMax.
	TransactionCheckMax int
	// RejectTransactionMessage refuses halves with NO_PERMISSION (16), as
	// rejectTransactionMessage=true does.
	RejectTransactionMessage bool
	// RandSource drives fault injection, so that a seeded source gives the same faults
	// on every run. Defaults to a PCG source seeded from the clock.
	RandSource rand.Source
	// Credentials, when not empty, are the ACL users (access key to secret key): the broker
	// refuses every request not signed by one of them with NO_PERMISSION (16), as a broker
	// with ACL on does for 4.x-style signatures (acl.go). The name server checks none.
	// Defaults to none: no request is checked.
	Credentials map[string]string
	// TLS, when not nil, serves the name server and the broker over TLS with this
	// configuration (its certificate is the servers'). Defaults to nil: plain TCP.
	TLS *tls.Config
	// BinaryHeaders makes the name server and the broker write everything with RocketMQ's
	// binary headers: their answers, whatever the serialization of the request, and the
	// requests they send (check-backs, notifications), as Apache RocketMQ 5.3.3 started with
	// rocketmq.serialize.type=ROCKETMQ does. Requests are read in either serialization.
	// Defaults to false: JSON headers, whatever the request's.
	BinaryHeaders bool
	// Logf receives the server's few log lines (unknown request codes, once each).
	// Defaults to the standard library logger.
	Logf func(format string, args ...any)
}

func (o *Options) setDefaults() {
	if o.NameServerAddr == "" {
		o.NameServerAddr = "127.0.0.1:0"
	}
	if o.BrokerAddr == "" {
		o.BrokerAddr = "127.0.0.1:0"
	}
	if o.BrokerName == "" {
		o.BrokerName = "broker-a"
	}
	if o.ClusterName == "" {
		o.ClusterName = "DefaultCluster"
	}
	if o.Queues <= 0 {
		o.Queues = 4
	}
	if o.MaxMessageSize <= 0 {
		o.MaxMessageSize = 4 << 20
	}
	if o.TransactionTimeout <= 0 {
		o.TransactionTimeout = defaultTransactionTimeout
	}
	if o.TransactionCheckMax <= 0 {
		o.TransactionCheckMax = defaultTransactionCheckMax
	}
	if o.RandSource == nil {
		now := uint64(time.Now().UnixNano())
		o.RandSource = rand.NewPCG(now, now>>1|1)
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
}

// Faults describes the failures injected into sends (SEND_MESSAGE, SEND_MESSAGE_V2,
// SEND_BATCH_MESSAGE; a batch is one send). Rates are fractions in [0, 1]: 0 never,
// 1 always. Each send rolls for each non-zero rate independently, in the order
// Latency, DropBeforeStore, ErrorRate, DropAfterStore, Unreplicated.
//
// Before a drop, pulls held (long-polling) on the same connection are answered "no
// new message": the Go client never fails requests pending on a closed connection, so
// a consumer sharing the producer's client would otherwise stall for its 30 s pull
// timeout (measured: 32 s instead of 2 ms).
type Faults struct {
	// ErrorRate is the fraction of sends answered with a broker error (ErrorCode) and not stored.
	ErrorRate float64
	// ErrorCode is the response code of injected errors. Defaults to 1 (SYSTEM_ERROR),
	// which the Go client retries; 2 (SYSTEM_BUSY) is one it does not.
	ErrorCode int16
	// Latency is added before a send is stored and answered. Sends on one connection
	// are still handled in arrival order, each Latency after it arrived.
	Latency time.Duration
	// DropBeforeStore is the fraction of sends for which the connection is closed
	// without storing the message or answering.
	DropBeforeStore float64
	// DropAfterStore is the fraction of sends that are stored and then the connection
	// closed without an answer: a lost ack, so a client retry stores a duplicate.
	DropAfterStore float64
	// ErrorRemark is the remark of injected errors. Defaults to "rmqtest: injected broker
	// error"; ACL refusals, say, are told apart by their remark.
	ErrorRemark string
	// Unreplicated is the fraction of sends that are stored and answered with
	// UnreplicatedCode, as a SYNC_MASTER whose slave is down answers.
	Unreplicated float64
	// UnreplicatedCode is the response code of sends stored without replication: 11
	// (SLAVE_NOT_AVAILABLE, the default), 12 (FLUSH_SLAVE_TIMEOUT) or 10 (FLUSH_DISK_TIMEOUT).
	UnreplicatedCode int16
}

// Message is a stored message as the inspection API returns it.
type Message struct {
	// Topic is the topic the message is stored in (a %RETRY% topic for redeliveries).
	Topic string
	// BrokerName is the name of the broker that stored it.
	BrokerName string
	// QueueID and QueueOffset locate the message in its topic.
	QueueID     int
	QueueOffset int64
	// CommitLogOffset is the broker-wide store position (what consumers send back).
	CommitLogOffset int64
	// Tags is the TAGS property.
	Tags string
	// Keys is the KEYS property split on spaces.
	Keys []string
	// Body is the message body, uncompressed if the client compressed it.
	Body []byte
	// Properties holds every property, system ones (TAGS, KEYS, UNIQ_KEY, DELAY, ...) included.
	Properties map[string]string
	// DelayLevel is the DELAY property (0 if none). It is recorded, not waited for.
	DelayLevel int
	// ReconsumeTimes counts redeliveries: 0 for a sent message, n for its n-th retry.
	ReconsumeTimes int
	// MsgID is the client's unique id (UNIQ_KEY), or OffsetMsgID when there is none.
	MsgID string
	// OffsetMsgID is the broker-assigned id (store host and commit log offset).
	OffsetMsgID string
	// Flag and SysFlag are the message's flag and system flag as received.
	Flag    int32
	SysFlag int32
	// BornTimestamp and StoreTimestamp are epoch milliseconds.
	BornTimestamp  int64
	StoreTimestamp int64
	// ProducerGroup is the group named in the send request (empty for redeliveries).
	ProducerGroup string
}

// UserProperties returns the message's properties without RocketMQ's system ones.
func (m Message) UserProperties() map[string]string {
	out := map[string]string{}
	for k, v := range m.Properties {
		if !systemProperties[k] {
			out[k] = v
		}
	}
	return out
}

// Server is an in-process RocketMQ name server plus one broker. All methods are safe
// for concurrent use.
type Server struct {
	opts       Options
	store      *store
	nameSrv    *listener
	brokerAddr string
	broker     *broker

	mu          sync.Mutex
	brokerLn    *listener
	closed      bool
	faults      Faults
	topicFaults map[string]Faults
	rnd         *rand.Rand
	unknownSeen map[int16]bool
	stopChecks  chan struct{}
	perm        atomic.Int32 // the broker permission: 6, or 4 when read-only
	maxMsgSize  atomic.Int64
	aclRefusals atomic.Int64
}

// Start starts the name server and the broker on loopback and returns once both accept connections.
func Start(opts Options) (*Server, error) {
	opts.setDefaults()
	s := &Server{
		opts:        opts,
		store:       newStore(),
		topicFaults: map[string]Faults{},
		rnd:         rand.New(opts.RandSource),
		unknownSeen: map[int16]bool{},
	}
	s.perm.Store(permReadWrite)
	s.maxMsgSize.Store(int64(opts.MaxMessageSize))
	s.broker = newBroker(s)
	bl, err := listen(opts.BrokerAddr, s.broker, opts.TLS, s.serialization())
	if err != nil {
		return nil, fmt.Errorf("rmqtest: broker listen: %w", err)
	}
	s.brokerLn = bl
	s.brokerAddr = bl.addr()
	ns, err := listen(opts.NameServerAddr, &nameServer{s: s}, opts.TLS, s.serialization())
	if err != nil {
		bl.close()
		return nil, fmt.Errorf("rmqtest: name server listen: %w", err)
	}
	s.nameSrv = ns
	s.stopChecks = make(chan struct{})
	if opts.TransactionCheckInterval > 0 {
		s.broker.wg.Add(1)
		go s.broker.checkLoop(opts.TransactionCheckInterval, s.stopChecks)
	}
	return s, nil
}

// NameServerAddr returns the name server's host:port, what clients are configured with.
func (s *Server) NameServerAddr() string { return s.nameSrv.addr() }

// BrokerAddr returns the broker's host:port (the same before and after StopBroker/StartBroker).
func (s *Server) BrokerAddr() string { return s.brokerAddr }

// Close stops the name server and the broker and drops every connection. It is safe to call twice.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	bl := s.brokerLn
	s.brokerLn = nil
	s.mu.Unlock()
	close(s.stopChecks)
	s.nameSrv.close()
	if bl != nil {
		s.broker.stop()
		bl.close()
	}
	s.broker.wait()
}

// StopBroker simulates a broker outage: its listener is closed and its connections
// dropped (pending sends get no answer; long-polling pulls are answered "no new
// message" first, so consumers notice at once). The name server keeps announcing the broker,
// as a real one does until its registration expires. Stored messages and consumer
// offsets are kept. Stopping a stopped broker does nothing.
func (s *Server) StopBroker() {
	s.mu.Lock()
	bl := s.brokerLn
	s.brokerLn = nil
	s.mu.Unlock()
	if bl != nil {
		s.broker.stop()
		bl.close()
		s.broker.loseRecentOps()
	}
}

// StartBroker brings a stopped broker back on the same address. Starting a running broker does nothing.
func (s *Server) StartBroker() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("rmqtest: server closed")
	}
	if s.brokerLn != nil {
		return nil
	}
	s.broker.restart()
	bl, err := listen(s.brokerAddr, s.broker, s.opts.TLS, s.serialization())
	if err != nil {
		return fmt.Errorf("rmqtest: broker listen again on %s: %w", s.brokerAddr, err)
	}
	s.brokerLn = bl
	return nil
}

// BrokerRunning reports whether the broker is accepting connections.
func (s *Server) BrokerRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.brokerLn != nil
}

// SetFaults sets the faults injected into sends to topics without their own (see SetTopicFaults).
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	s.faults = f
	s.mu.Unlock()
}

// SetTopicFaults sets the faults for one topic; they replace the global faults for it.
func (s *Server) SetTopicFaults(topic string, f Faults) {
	s.mu.Lock()
	s.topicFaults[topic] = f
	s.mu.Unlock()
}

// ClearFaults removes every injected fault, global and per topic.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.faults = Faults{}
	s.topicFaults = map[string]Faults{}
	s.mu.Unlock()
}

// faultsFor returns the faults in force for topic.
func (s *Server) faultsFor(topic string) Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f, ok := s.topicFaults[topic]; ok {
		return f
	}
	return s.faults
}

// roll reports whether an event of probability rate happens. Rate 0 never draws from
// the source, so faults that are off do not shift a seeded sequence.
func (s *Server) roll(rate float64) bool {
	if rate <= 0 {
		return false
	}
	if rate >= 1 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rnd.Float64() < rate
}

// serialization is the header serialization of everything the server writes.
func (s *Server) serialization() frame.Serialization {
	if s.opts.BinaryHeaders {
		return frame.RocketMQ
	}
	return frame.JSON
}

// logUnknown logs an unsupported request code the first time it is seen.
func (s *Server) logUnknown(who string, code int16, from net.Addr) {
	s.mu.Lock()
	seen := s.unknownSeen[code]
	s.unknownSeen[code] = true
	s.mu.Unlock()
	if !seen {
		s.opts.Logf("rmqtest: %s: request code %d from %s not supported; answered REQUEST_CODE_NOT_SUPPORTED", who, code, from)
	}
}

// Messages returns the messages stored in topic, in store order (so in order within each queue).
func (s *Server) Messages(topic string) []Message { return s.named(s.store.messages(topic, -1)) }

// QueueMessages returns the messages stored in one queue of topic, in offset order.
func (s *Server) QueueMessages(topic string, queue int) []Message {
	if queue < 0 {
		return nil
	}
	return s.named(s.store.messages(topic, queue))
}

// named sets the broker's name on msgs.
func (s *Server) named(msgs []Message) []Message {
	for i := range msgs {
		msgs[i].BrokerName = s.opts.BrokerName
	}
	return msgs
}

// Count returns the number of messages stored in topic.
func (s *Server) Count(topic string) int {
	n, _ := s.store.count(topic)
	return n
}

// WaitMessages waits until at least n messages are stored in topic and returns them
// all (as Messages does), or returns ctx's error with what is stored so far.
func (s *Server) WaitMessages(ctx context.Context, topic string, n int) ([]Message, error) {
	for {
		c, changed := s.store.count(topic)
		if c >= n {
			return s.Messages(topic), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return s.Messages(topic), fmt.Errorf("rmqtest: %d of %d messages in %s: %w", c, n, topic, ctx.Err())
		}
	}
}

// ConsumerOffset returns the offset a consumer group committed for a queue, or -1 if none.
func (s *Server) ConsumerOffset(group, topic string, queue int) int64 {
	return s.broker.consumerOffset(group, topic, queue)
}

// Consumers returns the client ids registered (by heartbeat) in a consumer group.
func (s *Server) Consumers(group string) []string { return s.broker.consumerIDs(group) }

// topicExists reports whether topic has a route: always, unless Options.Topics or
// Options.NoAutoCreateTopics restrict the topics; then only those listed in Options.Topics,
// made by CreateTopic (or the admin API), and retry and dead-letter topics exist.
func (s *Server) topicExists(topic string) bool {
	if strings.HasPrefix(topic, retryTopicPrefix) || strings.HasPrefix(topic, dlqTopicPrefix) {
		return true
	}
	if len(s.opts.Topics) == 0 && !s.opts.NoAutoCreateTopics {
		return true
	}
	return slices.Contains(s.opts.Topics, topic) || s.store.queueCount(topic) > 0
}
