// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/rowmsg"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/relay/metrics"
)

// Config configures a Publisher.
type Config struct {
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
	// TLS encrypts every connection to name servers and brokers with the client's own TLS,
	// which does not verify the server's certificate; the publisher logs a warning saying so.
	// For verified TLS, give NameServers of an internal/tlsbridge Bridge and leave TLS off.
	// The client keeps one TLS setting per process: NewPublisher refuses a TLS differing
	// from that of a publisher still open in the process (ClaimClientTLS).
	TLS bool
	// Connections is the number of connections to each broker, spread over as many
	// clients per producer group; sends go round robin. A broker that drops a connection
	// fails only the sends in flight on it, which are sent again at once on a new one
	// (connwatch.go), while the others go on. Defaults to 4.
	Connections int
	// RequireReplication treats a message the broker stored but did not replicate or flush
	// as asked (SLAVE_NOT_AVAILABLE, FLUSH_SLAVE_TIMEOUT, FLUSH_DISK_TIMEOUT) as a failed
	// attempt, counted against max_retry_count. Defaults to false: stored means sent, and
	// each such send is counted in outbox_relay_sent_unreplicated_total and logged.
	RequireReplication bool
	// Metrics counts sends stored without replication. Defaults to none.
	Metrics *metrics.Metrics
	// Log receives the lines on brokers going down and coming back, on ordered queues
	// waiting for their broker and on sends stored without replication. Defaults to none.
	Log zerolog.Logger
}

// Publisher publishes with rocketmq-client-go, one producer per group, started on
// first use. Messages with a sharding key go to the queue chosen by its hash over every
// queue the topic was seen with (the same queue for the same key, even while a broker is
// out of the route); others round robin over the queues of brokers that are not down. A
// send that fails for a reason of its broker marks the broker down: an unordered message
// is sent again at once to another broker of the topic, and an ordered message whose queue
// is on a down broker is not sent but answered with an ErrBrokerUnreachable error naming
// the broker, so that the relay defers it without counting a retry. The client's own
// retries are off: the relay retries on its backoff schedule and records every failure in
// the row.
type Publisher struct {
	cfg      Config
	instance string
	queues   *queueChooser
	tls      *TLSClaim // the client's process-wide TLS switch, held until Close

	mu        sync.Mutex
	producers map[string][]client // by group: Connections producers each
	next      atomic.Uint32       // round robin over a group's producers
	closed    bool

	probeMu sync.Mutex
	probed  map[string]routeProbe // by topic

	unreplicated unreplicatedLog
	watch        connWatch
	health       brokerHealth // per broker, for the dashboard (brokerhealth.go)
	// noKeyedBatches holds, per topic whose broker refused a batch of keyed messages, the
	// keyedPause during which its keyed messages go one request each.
	noKeyedBatches sync.Map
	keyedMu        sync.Mutex       // serializes the pauses' changes (not QueueOf's reads)
	now            func() time.Time // the clock of keyed batches' pauses
}

// NewPublisher checks cfg and returns a publisher; no connection is made until the
// first Send.
func NewPublisher(cfg Config) (*Publisher, error) {
	if len(cfg.NameServers) == 0 {
		return nil, fmt.Errorf("relay: Config.NameServers is empty")
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
	if cfg.Connections <= 0 {
		cfg.Connections = 4
	}
	claim, err := ClaimClientTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	return &Publisher{
		cfg: cfg,
		tls: claim,
		// A distinct instance name per publisher lets several publishers of the same group
		// live in one process (the client registers groups per instance).
		instance:  fmt.Sprintf("outbox-relay-%d-%s", os.Getpid(), randomHex(4)),
		producers: map[string][]client{},
		queues:    newQueueChooser(cfg.Log),
		now:       time.Now,
	}, nil
}

// client is one of a group's producers, each with its own connections; n tells them apart.
type client struct {
	rocketmq.Producer
	n       int
	watched bool // its sends are watched for dropped connections (connWatch.hookClient)
}

// producer returns the next of group's producers, starting them on first use.
func (p *Publisher) producer(group string) (client, error) {
	if group == "" {
		group = p.cfg.Group
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return client{}, errors.New("relay: publisher closed")
	}
	prods := p.producers[group]
	if len(prods) == 0 {
		for c := 0; c < p.cfg.Connections; c++ {
			prod, watched, err := p.newProducer(group, c)
			if err != nil {
				for _, started := range prods {
					_ = started.Shutdown()
				}
				return client{}, err
			}
			prods = append(prods, client{Producer: prod, n: c, watched: watched})
		}
		p.producers[group] = prods
		p.reportWatch(group, prods)
		if slices.ContainsFunc(prods, func(c client) bool { return c.watched }) {
			p.watch.start()
		}
	}
	return prods[p.next.Add(1)%uint32(len(prods))], nil
}

// newProducer starts the producer of group for connection c: each has an instance name, and
// so a client and connections, of its own. watched reports whether its sends are watched for
// dropped connections.
func (p *Publisher) newProducer(group string, c int) (prod rocketmq.Producer, watched bool, err error) {
	opts := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(p.cfg.NameServers)),
		producer.WithGroupName(group),
		producer.WithInstanceName(fmt.Sprintf("%s-c%d", p.instance, c)),
		producer.WithRetry(0),
		producer.WithSendMsgTimeout(p.cfg.SendTimeout),
		producer.WithQueueSelector(p.queues),
		producer.WithInterceptor(p.attributeBroker),
	}
	if p.cfg.Namespace != "" {
		opts = append(opts, producer.WithNamespace(p.cfg.Namespace))
	}
	if p.cfg.AccessKey != "" {
		opts = append(opts, producer.WithCredentials(primitive.Credentials{AccessKey: p.cfg.AccessKey, SecretKey: p.cfg.SecretKey}))
	}
	// The client keeps the TLS switch in one process-wide value read by every dial: the
	// claim writes it only when it differs (clienttls.go).
	err = p.tls.Build(func(writeTLS bool) (err error) {
		if writeTLS {
			opts = append(opts, producer.WithTls(p.cfg.TLS))
		}
		prod, err = rocketmq.NewProducer(opts...)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("relay: new producer %s: %w", group, err)
	}
	active := p.watch.hookClient(prod) // before Start: the client's interceptor is set unguarded
	if err := prod.Start(); err != nil {
		return nil, false, fmt.Errorf("relay: start producer %s: %w", group, err)
	}
	return prod, active != nil && active(), nil
}

// reportWatch logs whether the sends of group's producers prods are watched for dropped
// connections, and sets outbox_relay_rocketmq_connection_watch to say so.
func (p *Publisher) reportWatch(group string, prods []client) {
	watched := 0
	for _, c := range prods {
		if c.watched {
			watched++
		}
	}
	p.cfg.Metrics.ConnectionWatch(group, watched == len(prods))
	if watched == len(prods) {
		p.cfg.Log.Info().Str("group", group).Bool("credentials", p.cfg.AccessKey != "").
			Msg("rocketmq: dropped connections detected: sends waiting on a closed connection are sent again at once")
		return
	}
	p.cfg.Log.Warn().Str("group", group).Bool("credentials", p.cfg.AccessKey != "").Int("watched", watched).Int("producers", len(prods)).
		Msg("rocketmq: dropped connections NOT detected (the client's layout is not the pinned one): a send on a closed connection waits for its send timeout")
}

// Send publishes msgs in one request (a batch when there are several). See
// Publisher for the choice of queue and what happens while a broker is down.
func (p *Publisher) Send(ctx context.Context, route message.Route, msgs ...*message.Message) error {
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
	keyedBatch := len(msgs) > 1 && msgs[0].ShardingKey != ""
	if len(msgs) == 1 || keyedBatch {
		// A batch of keyed messages goes to the queue of its keys, which QueueOf found to
		// be one; an unkeyed batch round robin.
		key = msgs[0].ShardingKey
	}
	if keyedBatch && !p.oneQueue(topic, msgs) {
		return &message.SendError{Kind: message.SendRefused, Code: -1, Err: errKeysOnSeveralQueues}
	}
	mq, wait := p.queues.pick(topic, key, route.Ordered && key != "")
	if wait != nil {
		// The sentinel stays wrapped for callers still testing errors.Is against it.
		return &message.SendError{Kind: message.SendUnreachable, Broker: wait.addr, Code: -1,
			Err: fmt.Errorf("%w: %w", message.ErrBrokerUnreachable, wait)}
	}
	err = p.sendTo(ctx, prod, route, msgs, out, mq)
	if keyedBatch {
		p.keyedBatchAnswered(topic, err)
	}
	for resend := 0; resend < maxResends && (errors.Is(err, errConnectionLost) || errors.Is(err, errRouteUnsettled)) && ctx.Err() == nil; resend++ {
		// The connection of this send was lost, not the broker: send again at once, on the
		// next connection (the client opens a new one in place of the lost). Whether the
		// first was stored is unknown; a copy is what a lost ack costs anyway.
		if prod, err = p.producer(route.Group); err != nil {
			return err
		}
		out = make([]*primitive.Message, len(msgs))
		for i, m := range msgs {
			out[i] = toPrimitive(m, route)
		}
		err = p.sendTo(ctx, prod, route, msgs, out, mq)
	}
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
	if err = p.sendTo(ctx, prod, route, msgs, out, other); err != nil && brokerFault(err) {
		_, err = p.brokerFailed(err)
	}
	return err
}

// errKeysOnSeveralQueues answers a batch of keyed messages whose keys no longer go to one
// queue (the topic's queues changed since the relay grouped them): the relay sends them one
// at a time instead.
var errKeysOnSeveralQueues = errors.New("the batch's sharding keys go to different queues")

// QueueOf implements KeyBatcher: the queue that messages of topic with shardingKey go to
// (the stable hash queue, ordered route or not), once a send to topic made its queues known,
// and unless its broker refused a batch of keyed messages within the pause that followed.
func (p *Publisher) QueueOf(topic, shardingKey string) (string, bool) {
	topic = p.qualified(topic)
	if v, off := p.noKeyedBatches.Load(topic); off && p.now().Before(v.(keyedPause).until) {
		return "", false
	}
	q, ok := p.queues.keyQueue(topic, shardingKey)
	if !ok {
		return "", false
	}
	return q.broker + "/" + strconv.Itoa(q.id), true
}

// oneQueue reports whether the keyed messages msgs of topic all go to one queue.
func (p *Publisher) oneQueue(topic string, msgs []*message.Message) bool {
	keys := make([]string, len(msgs))
	for i, m := range msgs {
		keys[i] = m.ShardingKey
	}
	_, ok := p.queues.keyQueue(topic, keys...)
	return ok
}

// Keyed batches to a topic whose broker refused one stop for keyedPauseMin, then are tried
// again; each refusal of the batch that tries again doubles the pause, up to keyedPauseMax.
// A refusal may be passing (an ACL grant not yet landed, a code this version does not know)
// or lasting (a 5.x proxy validating a FIFO topic reads a batch as NORMAL: the client's batch
// request carries none of its messages' properties); either way a pause costs requests, not
// messages, and a lasting refusal costs one refused batch per keyedPauseMax.
const (
	keyedPauseMin = time.Minute
	keyedPauseMax = 16 * time.Minute
)

// keyedPause is a topic's pause of keyed batches: until when, and how long it was.
type keyedPause struct {
	until  time.Time
	length time.Duration
}

// keyedBatchAnswered records the answer to a batch of keyed messages to topic: a refusal
// (refused, misconfigured or permanent) pauses the topic's keyed batches (keyedPauseMin,
// doubled by each refusal after a pause), a success ends the pause and its doubling.
func (p *Publisher) keyedBatchAnswered(topic string, err error) {
	if err == nil {
		if _, was := p.noKeyedBatches.LoadAndDelete(topic); was {
			p.cfg.Log.Info().Str("topic", topic).Msg("the broker took a batch of keyed messages again: this topic's keyed messages go in batches")
		}
		return
	}
	switch message.KindOf(err) {
	case message.SendRefused, message.SendMisconfigured, message.SendPermanent:
	default:
		return
	}
	p.keyedMu.Lock()
	defer p.keyedMu.Unlock()
	now := p.now()
	pause := keyedPause{length: keyedPauseMin}
	if v, ok := p.noKeyedBatches.Load(topic); ok {
		old := v.(keyedPause)
		if now.Before(old.until) {
			return // a batch sent before the pause began: paused already
		}
		pause.length = min(2*old.length, keyedPauseMax)
	}
	pause.until = now.Add(pause.length)
	p.noKeyedBatches.Store(topic, pause)
	p.cfg.Log.Warn().Str("topic", topic).Err(err).Dur("for", pause.length).
		Msg("the broker refused a batch of keyed messages: this topic's keyed messages go one request each for a while, then a batch tries again")
}

// maxResends bounds the immediate re-sends of a send whose connection was lost. Each costs
// milliseconds and at most a copy of a stored message; a send that still fails defers its
// ordered key by the broker incident's backoff (0.5 s and more), so four, not two: with 3 %
// + 3 % of connections dropped, two left 8-partition relays at 0.4-0.5x of their no-drop rate,
// four at 0.7-1.0x (BenchmarkOrderedUnderDroppedConnections).
const maxResends = 4

// brokerFailed tells the queue chooser about a send that failed for its broker's reason and
// returns the broker's name ("" when unknown) and the error, marked ErrBrokerUnreachable
// when the broker was known to be down.
func (p *Publisher) brokerFailed(err error) (string, error) {
	addr := message.BrokerOf(err)
	var se *message.SendError
	if errors.As(err, &se) && se.Code >= 0 {
		// The broker answered (busy, flow control, an error): not down, but an unordered
		// message is better sent elsewhere now.
		return p.queues.nameOf(addr), err
	}
	unreachable := message.KindOf(err) == message.SendUnreachable
	broker, wasDown := p.queues.failed(addr, err, unreachable)
	if wasDown && !unreachable {
		// A probe of a broker known to be down (a timeout, say): the broker's outage, not
		// this message's failure.
		err = &message.SendError{Kind: message.SendUnreachable, Broker: addr, Code: -1,
			Err: fmt.Errorf("%w: broker %s still failing: %w", message.ErrBrokerUnreachable, broker, err)}
	}
	return broker, err
}

// sendTo makes one send of out (msgs as the client sends them) to mq (nil: the queue
// selector chooses), within the route's send timeout; on success each of msgs has Stored set.
func (p *Publisher) sendTo(ctx context.Context, prod client, route message.Route, msgs []*message.Message, out []*primitive.Message, mq *primitive.MessageQueue) error {
	timeout := route.SendTimeout
	if timeout <= 0 {
		timeout = p.cfg.SendTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for _, m := range out {
		m.Queue = mq
	}
	if prod.watched {
		var done func()
		ctx, done = p.watch.watch(ctx)
		defer done()
	}
	res, err := prod.SendSync(ctx, out...)
	if err != nil {
		err = p.classify(ctx, err, out[0].Topic, len(out) > 1)
		p.health.failed(message.BrokerOf(err), err)
		var se *message.SendError
		if errors.Is(context.Cause(ctx), errConnectionDropped) && errors.As(err, &se) && !errors.Is(err, errConnectionLost) {
			// The broker closed the connection the send waited on: whether it stored the
			// message is unknown, and Send sends it again at once on the new connection.
			se.Kind, se.Err = message.SendTransient, fmt.Errorf("%w: %w: %w", errConnectionLost, errConnectionDropped, se.Err)
		}
		return err
	}
	if res.Status != primitive.SendOK {
		err = p.storedStatus(res, out[0].Topic, len(out))
	}
	if err == nil {
		noteStored(res, msgs)
	}
	return err
}

// brokerFault reports whether a failed send is the broker's fault (unreachable, timed out,
// busy, read-only), not the message's or the topic's.
func brokerFault(err error) bool {
	k := message.KindOf(err)
	return message.BrokerOf(err) != "" && (k == message.SendTransient || k == message.SendUnreachable)
}

// attributeBroker is a producer interceptor that attributes a failed send to the broker
// address the client chose, so that the relay judges incidents per broker, and tells the
// queue chooser which broker answered.
func (p *Publisher) attributeBroker(ctx context.Context, req, reply any, next primitive.Invoker) error {
	start := time.Now()
	err := next(ctx, req, reply)
	pc, ok := primitive.GetProducerCtx(ctx)
	if !ok {
		return err
	}
	if err != nil {
		p.queues.attempted(pc.MQ.BrokerName, pc.BrokerAddr)
		return atBroker(pc.BrokerAddr, err)
	}
	p.queues.sent(pc.MQ.BrokerName, pc.BrokerAddr)
	p.health.acked(pc.MQ.BrokerName, pc.BrokerAddr, time.Since(start))
	return nil
}

func toPrimitive(m *message.Message, route message.Route) *primitive.Message {
	return rowmsg.Build(rowmsg.Fields{MsgID: m.MsgID, Topic: m.Topic, Tag: m.Tag, Body: m.Body, Keys: m.Keys,
		ShardingKey: m.ShardingKey, MessageGroup: route.Ordered, DelayLevel: route.DelayLevel, Properties: m.Properties})
}

// Close shuts every producer down.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.watch.stop()
	defer p.tls.Release() // after the producers are shut down
	var errs []error
	for group, prods := range p.producers {
		for _, prod := range prods {
			if err := prod.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("shutdown producer %s: %w", group, err))
			}
		}
	}
	return errors.Join(errs...)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
