package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// RocketMQConfig configures a RocketMQPublisher.
type RocketMQConfig struct {
	// NameServers are the name server addresses (host:port). Required.
	NameServers []string
	// Group is the default producer group. Defaults to "outbox-relay".
	Group string
	// SendTimeout bounds one send when the route sets none. Defaults to 3 seconds, which is
	// also the most rocketmq-client-go allows one attempt.
	SendTimeout time.Duration
	// AccessKey and SecretKey are ACL credentials; empty for none.
	AccessKey, SecretKey string
}

// RocketMQPublisher publishes with rocketmq-client-go, one producer per group, started on
// first use. Messages with a sharding key go to the queue chosen by its hash (the same queue
// for the same key); others to any queue. The client's own retries are off: the relay
// retries on its backoff schedule and records every failure in the row.
type RocketMQPublisher struct {
	cfg      RocketMQConfig
	instance string

	mu        sync.Mutex
	producers map[string]rocketmq.Producer
	closed    bool
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
	return &RocketMQPublisher{
		cfg: cfg,
		// A distinct instance name per publisher lets several publishers of the same group
		// live in one process (the client registers groups per instance).
		instance:  fmt.Sprintf("outbox-relay-%d-%s", os.Getpid(), randomHex(4)),
		producers: map[string]rocketmq.Producer{},
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
		producer.WithQueueSelector(producer.NewHashQueueSelector()),
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

// Send publishes msgs in one request (a batch when there are several).
func (p *RocketMQPublisher) Send(ctx context.Context, route Route, msgs ...*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	prod, err := p.producer(route.Group)
	if err != nil {
		return err
	}
	timeout := route.SendTimeout
	if timeout <= 0 {
		timeout = p.cfg.SendTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out := make([]*primitive.Message, len(msgs))
	for i, m := range msgs {
		out[i] = toPrimitive(m, route)
	}
	res, err := prod.SendSync(ctx, out...)
	if err != nil {
		return classify(err)
	}
	if res.Status != primitive.SendOK {
		// Stored but not flushed or replicated as the broker was asked to: not an ack.
		return fmt.Errorf("broker answered send status %d", res.Status)
	}
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
		pm.WithKeys([]string{m.MsgID})
	}
	if m.ShardingKey != "" {
		pm.WithShardingKey(m.ShardingKey)
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

// classify marks the client's errors for the relay (see Publisher). rocketmq-client-go v2.1.2
// reports a broker's answer as "CODE: n, DESC: ..." and a failure to connect with the dialer's
// or the name server's own words.
func classify(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "CODE: 13,"): // MESSAGE_ILLEGAL: size or properties
		return Permanent(Refused(err))
	case strings.HasPrefix(msg, "CODE: "):
		return Refused(err)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%w: %w", ErrBrokerUnreachable, err)
	}
	lower := strings.ToLower(msg)
	for _, w := range []string{"connection refused", "route info not found", "no route to host", "network is unreachable"} {
		if strings.Contains(lower, w) {
			return fmt.Errorf("%w: %w", ErrBrokerUnreachable, err)
		}
	}
	return err
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
