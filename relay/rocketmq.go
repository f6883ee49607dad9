package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// RocketMQConfig configures a RocketMQPublisher.
type RocketMQConfig struct {
	// NameServers are the name server addresses (host:port). Required.
	NameServers []string
	// Group is the default producer group. Defaults to "outbox-relay".
	Group string
	// SendTimeout bounds one send when the route sets none, and is the client's own bound
	// of one attempt (a route's longer SendTimeout is cut to it). Defaults to 3 seconds.
	SendTimeout time.Duration
	// AccessKey and SecretKey are ACL credentials; empty for none.
	AccessKey, SecretKey string
	// Namespace is the RocketMQ namespace (an instance id on some managed offerings): topics
	// are sent as "Namespace%topic". Empty for none.
	Namespace string
	// TLS encrypts every connection to name servers and brokers. rocketmq-client-go does not
	// verify the server's certificate; the publisher logs a warning saying so.
	TLS bool
	// Log receives the lines on brokers going down and coming back and on ordered queues
	// waiting for their broker. Defaults to none.
	Log zerolog.Logger
}

// RocketMQPublisher publishes with rocketmq-client-go, one producer per group, started on
// first use. Messages with a sharding key go to the queue chosen by its hash over every
// queue the topic was seen with (the same queue for the same key, even while a broker is
// out of the route); others round robin over the queues of brokers that are not down. A
// send that fails for a reason of its broker marks the broker down: an unordered message
// is sent again at once to another broker of the topic, and an ordered message whose queue
// is on a down broker is not sent but answered with an ErrBrokerUnreachable error naming
// the broker, so that the relay defers it without counting a retry. The client's own
// retries are off: the relay retries on its backoff schedule and records every failure in
// the row.
type RocketMQPublisher struct {
	cfg      RocketMQConfig
	instance string
	queues   *queueChooser

	mu        sync.Mutex
	producers map[string]rocketmq.Producer
	closed    bool

	probeMu   sync.Mutex
	probedAt  time.Time
	nsReached bool
}

// NewRocketMQPublisher checks cfg and returns a publisher; no connection is made until the
// first Send.
func NewRocketMQPublisher(cfg RocketMQConfig) (*RocketMQPublisher, error) {
	if len(cfg.NameServers) == 0 {
		return nil, fmt.Errorf("relay: RocketMQConfig.NameServers is empty")
	}
	if cfg.Group == "" {
		cfg.Group = "outbox-relay"
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 3 * time.Second
	}
	if cfg.TLS {
		cfg.Log.Warn().Strs("nameservers", cfg.NameServers).
			Msg("TLS to RocketMQ without certificate verification: rocketmq-client-go accepts any server certificate")
	}
	return &RocketMQPublisher{
		cfg: cfg,
		// A distinct instance name per publisher lets several publishers of the same group
		// live in one process (the client registers groups per instance).
		instance:  fmt.Sprintf("outbox-relay-%d-%s", os.Getpid(), randomHex(4)),
		producers: map[string]rocketmq.Producer{},
		queues:    newQueueChooser(cfg.Log),
	}, nil
}

func (p *RocketMQPublisher) producer(group string) (rocketmq.Producer, error) {
	if group == "" {
		group = p.cfg.Group
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("relay: publisher closed")
	}
	if prod, ok := p.producers[group]; ok {
		return prod, nil
	}
	opts := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(p.cfg.NameServers)),
		producer.WithGroupName(group),
		producer.WithInstanceName(p.instance),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(p.cfg.SendTimeout),
		producer.WithQueueSelector(p.queues),
		producer.WithInterceptor(p.attributeBroker),
	}
	if p.cfg.Namespace != "" {
		opts = append(opts, producer.WithNamespace(p.cfg.Namespace))
	}
	if p.cfg.TLS {
		opts = append(opts, producer.WithTls(true))
	}
	if p.cfg.AccessKey != "" {
		opts = append(opts, producer.WithCredentials(primitive.Credentials{AccessKey: p.cfg.AccessKey, SecretKey: p.cfg.SecretKey}))
	}
	prod, err := rocketmq.NewProducer(opts...)
	if err != nil {
		return nil, fmt.Errorf("relay: new producer %s: %w", group, err)
	}
	if err := prod.Start(); err != nil {
		return nil, fmt.Errorf("relay: start producer %s: %w", group, err)
	}
	p.producers[group] = prod
	return prod, nil
}

// Send publishes msgs in one request (a batch when there are several). See
// RocketMQPublisher for the choice of queue and what happens while a broker is down.
func (p *RocketMQPublisher) Send(ctx context.Context, route Route, msgs ...*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	prod, err := p.producer(route.Group)
	if err != nil {
		return err
	}
	out := make([]*primitive.Message, len(msgs))
	for i, m := range msgs {
		out[i] = toPrimitive(m, route)
	}
	topic, key := p.qualified(msgs[0].Topic), ""
	if len(msgs) == 1 {
		key = msgs[0].ShardingKey // a batch is never of keyed messages (see plan)
	}
	mq, wait := p.queues.pick(topic, key, route.Ordered && key != "")
	if wait != nil {
		return AtBroker(wait.addr, fmt.Errorf("%w: %w", ErrBrokerUnreachable, wait))
	}
	err = p.sendTo(ctx, prod, route, out, mq)
	if err == nil || !brokerFault(err) || ctx.Err() != nil {
		return err
	}
	broker, err := p.brokerFailed(err)
	if route.Ordered && key != "" {
		p.queues.waiting(topic, key, mq)
		return err
	}
	if broker == "" {
		return err
	}
	// The broker failed, not the message: another broker of the topic takes it now, with
	// no retry counted and no backoff waited.
	other := p.queues.failover(topic, broker)
	if other == nil {
		return err
	}
	if err = p.sendTo(ctx, prod, route, out, other); err != nil && brokerFault(err) {
		_, err = p.brokerFailed(err)
	}
	return err
}

// brokerFailed tells the queue chooser about a send that failed for its broker's reason and
// returns the broker's name ("" when unknown) and the error, marked ErrBrokerUnreachable
// when the broker was known to be down.
func (p *RocketMQPublisher) brokerFailed(err error) (string, error) {
	addr := BrokerOf(err)
	var be *BrokerError
	errors.As(err, &be)
	if brokerCode(be.Err.Error()) != -1 {
		// The broker answered (busy, flow control, an error): not down, but an unordered
		// message is better sent elsewhere now.
		return p.queues.nameOf(addr), err
	}
	broker, wasDown := p.queues.failed(addr, err, errors.Is(err, ErrBrokerUnreachable))
	if wasDown && !errors.Is(err, ErrBrokerUnreachable) {
		// A probe of a broker known to be down (a timeout, say): the broker's outage, not
		// this message's failure.
		err = AtBroker(addr, fmt.Errorf("%w: broker %s still failing: %w", ErrBrokerUnreachable, broker, err))
	}
	return broker, err
}

// sendTo makes one send of out to mq (nil: the queue selector chooses), within the route's
// send timeout.
func (p *RocketMQPublisher) sendTo(ctx context.Context, prod rocketmq.Producer, route Route, out []*primitive.Message, mq *primitive.MessageQueue) error {
	timeout := route.SendTimeout
	if timeout <= 0 {
		timeout = p.cfg.SendTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, m := range out {
		m.Queue = mq
	}
	res, err := prod.SendSync(ctx, out...)
	if err != nil {
		return p.classify(err, len(out) > 1)
	}
	if res.Status != primitive.SendOK {
		// Stored but not flushed or replicated as the broker was asked to: not an ack.
		return fmt.Errorf("broker answered send status %d", res.Status)
	}
	return nil
}

// brokerFault reports whether a failed send is the broker's fault (unreachable, timed out,
// busy, read-only), not the message's or the topic's.
func brokerFault(err error) bool {
	return BrokerOf(err) != "" && !IsRefused(err) && !IsPermanent(err) && !errors.Is(err, ErrTopicNotFound)
}

// attributeBroker is a producer interceptor that attributes a failed send to the broker
// address the client chose, so that the relay judges incidents per broker, and tells the
// queue chooser which broker answered.
func (p *RocketMQPublisher) attributeBroker(ctx context.Context, req, reply any, next primitive.Invoker) error {
	err := next(ctx, req, reply)
	pc, ok := primitive.GetProducerCtx(ctx)
	if !ok {
		return err
	}
	if err != nil {
		p.queues.attempted(pc.MQ.BrokerName, pc.BrokerAddr)
		return AtBroker(pc.BrokerAddr, err)
	}
	p.queues.sent(pc.MQ.BrokerName, pc.BrokerAddr)
	return nil
}

func toPrimitive(m *Message, route Route) *primitive.Message {
	pm := primitive.NewMessage(m.Topic, m.Body)
	if m.Tag != "" {
		pm.WithTag(m.Tag)
	}
	if len(m.Keys) > 0 {
		pm.WithKeys(m.Keys)
	} else {
		pm.WithProperty(primitive.PropertyKeys, m.MsgID) // WithKeys of one key, without its slice
	}
	if m.ShardingKey != "" {
		pm.WithShardingKey(m.ShardingKey)
		if route.Ordered {
			// RocketMQ 5.x reads the message group of a FIFO topic here (SHARDING_KEY is
			// 4.x's, kept for the queue hash): FIFO consumers then keep the key's order, and
			// a 5.x proxy accepts the message on a FIFO topic (and refuses it on a NORMAL one).
			pm.WithProperty(propertyMessageGroup, m.ShardingKey)
		}
	}
	if route.DelayLevel > 0 {
		pm.WithDelayTimeLevel(route.DelayLevel)
	}
	for k, v := range m.Properties {
		pm.WithProperty(k, v)
	}
	pm.WithProperty(outbox.MsgIDProperty, m.MsgID)
	return pm
}

// Response codes of RocketMQ's remoting protocol that classify needs.
const (
	codeSystemError        = 1
	codeSystemBusy         = 2
	codeMessageIllegal     = 13
	codeServiceUnavailable = 14
	codeNoPermission       = 16
	codeTopicNotExist      = 17
)

// brokerCode returns the response code of a broker's answer as rocketmq-client-go v2.1.2
// reports it ("CODE: n, DESC: ..."), or -1.
func brokerCode(msg string) int {
	rest, ok := strings.CutPrefix(msg, "CODE: ")
	if !ok {
		return -1
	}
	end := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return -1
	}
	n, err := strconv.Atoi(rest[:end])
	if err != nil {
		return -1
	}
	return n
}

// classify marks the client's errors for the relay (see Publisher). A broker's answer is
// classified by its code; "route info not found" is a missing topic when a name server
// answers and an unreachable cluster when none does; connection failures are unreachable;
// everything else (timeouts, dropped connections) is left unmarked: transient.
func (p *RocketMQPublisher) classify(err error, batch bool) error {
	broker := BrokerOf(err)
	msg := err.Error()
	var be *BrokerError
	if errors.As(err, &be) {
		msg = be.Err.Error()
	}
	switch code := brokerCode(msg); code {
	case -1:
	case codeMessageIllegal: // size or properties: no retry can cure it
		return Permanent(Refused(err))
	case codeTopicNotExist:
		return fmt.Errorf("%w: %w", ErrTopicNotFound, err)
	case codeSystemError:
		if strings.Contains(msg, "size exceeded") {
			// Apache RocketMQ 5.3 refuses a batch holding an oversized message, or too large
			// as a whole, with SYSTEM_ERROR ("message body size exceeded"): about the request,
			// not the broker, so the relay sends the batch's messages one by one.
			if batch {
				return Refused(err)
			}
			return Permanent(Refused(err))
		}
		return err
	case codeSystemBusy, codeServiceUnavailable, codeNoPermission:
		// The broker's state, not the message's: busy, flow control, disk full, read-only.
		return err
	default:
		return Refused(err)
	}
	lower := strings.ToLower(msg)
	if strings.Contains(lower, "route info not found") {
		if p.nameServerAnswers() {
			return fmt.Errorf("%w: %w (does the topic exist? with autoCreateTopicEnable=false it must be created first)", ErrTopicNotFound, err)
		}
		return fmt.Errorf("%w: no name server answers at %s: %w", ErrBrokerUnreachable, strings.Join(p.cfg.NameServers, ","), err)
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return AtBroker(broker, fmt.Errorf("%w: %w", ErrBrokerUnreachable, err))
	}
	for _, w := range []string{"connection refused", "no route to host", "network is unreachable"} {
		if strings.Contains(lower, w) {
			return fmt.Errorf("%w: %w", ErrBrokerUnreachable, err)
		}
	}
	return err
}

// nameServerAnswers reports whether any name server accepts a TCP connection, checked at
// most once a second: it tells a topic without a route from a cluster out of reach.
func (p *RocketMQPublisher) nameServerAnswers() bool {
	p.probeMu.Lock()
	defer p.probeMu.Unlock()
	if time.Since(p.probedAt) < time.Second {
		return p.nsReached
	}
	p.nsReached = false
	for _, addr := range p.cfg.NameServers {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			c.Close()
			p.nsReached = true
			break
		}
	}
	p.probedAt = time.Now()
	return p.nsReached
}

// Close shuts every producer down.
func (p *RocketMQPublisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for group, prod := range p.producers {
		if err := prod.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("shutdown producer %s: %w", group, err))
		}
	}
	return errors.Join(errs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
