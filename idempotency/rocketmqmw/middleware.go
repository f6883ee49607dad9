// SPDX-License-Identifier: Apache-2.0

package rocketmqmw

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/internal/msgtrace"
)

// Handler applies the business effect of one message. Its context is cancelled when
// Middleware.Close is called (on shutdown); returning an error then has the message
// redelivered.
type Handler func(ctx context.Context, msg *primitive.MessageExt) error

// TxHandler applies the business effect of one message through tx, the transaction that
// also records the message as consumed. It must not commit or roll back tx.
type TxHandler func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error

// MissingKeyPolicy says what the middleware does with a message that has no key.
type MissingKeyPolicy int

const (
	// MissingKeyReject never applies a message without a key: the handler is not called,
	// OnInvalid is, and the message is acknowledged unless OnInvalid returns an error. It is
	// the default because applying a message that cannot be deduplicated could apply it
	// twice (charge twice), and redelivering it cannot give it a key.
	MissingKeyReject MissingKeyPolicy = iota
	// MissingKeyUseMsgID keys a message without a key by its message id (the producer's
	// UNIQ_KEY, kept across broker redeliveries and retries). That deduplicates the broker's
	// redeliveries but not a producer sending the same event twice, which gets a new id: use
	// it only for consumers where that is acceptable. A message without an id is rejected.
	MissingKeyUseMsgID
)

// String returns the policy's name.
func (p MissingKeyPolicy) String() string {
	switch p {
	case MissingKeyReject:
		return "reject"
	case MissingKeyUseMsgID:
		return "use_msg_id"
	}
	return fmt.Sprintf("MissingKeyPolicy(%d)", int(p))
}

// InvalidFunc is told about a message that will not be applied because it has no usable
// key; err wraps idempotency.ErrNoKey or idempotency.ErrInvalidKey. Returning nil
// acknowledges the message; returning an error asks for redelivery, which in concurrent
// mode ends in the group's dead-letter queue %DLQ%<group> after the maximum reconsume
// times. It may be called more than once for one message: a batch is redelivered whole.
type InvalidFunc func(ctx context.Context, msg *primitive.MessageExt, err error) error

// Defaults of Config.
const (
	// DefaultOrderlySuspend is how long an orderly queue is suspended before a failed
	// message is retried in place (RocketMQ's Java client uses 1 second too).
	DefaultOrderlySuspend = time.Second
	// DefaultBroadcastRetry is the first delay between in-place retries in broadcasting
	// mode; it doubles up to a minute.
	DefaultBroadcastRetry = time.Second
)

// Config configures the middleware.
type Config struct {
	// Key extracts the business key of a message (the order number). Defaults to
	// KeyFromKeys().
	Key KeyFunc
	// Identity qualifies the key into the identity that is deduplicated. Defaults to
	// TopicTagIdentity: group (the guard's) + topic + tag + key, so that created and paid of
	// one order are two events. An identity longer than idempotency.MaxSQLKeyLen bytes is
	// replaced by its SHA-256.
	Identity IdentityFunc
	// MissingKey is the policy for messages without a key. Defaults to MissingKeyReject.
	MissingKey MissingKeyPolicy
	// OnInvalid is called for every message rejected for want of a usable key. Defaults to
	// logging the message's topic, id, keys and the reason at error level on Logger, and
	// acknowledging it (the broker keeps the message, which can be looked up by id).
	OnInvalid InvalidFunc
	// Logger receives a line per rejected message, per applied message whose key could not
	// be recorded, per panic (error level) and per failed message (warn level). Defaults to
	// slog.Default(), so that a rejected message is never silent.
	Logger *slog.Logger
	// OrderlySuspend is how long an orderly consumer's queue waits before a message that
	// must be redelivered is retried in place. Defaults to DefaultOrderlySuspend (1s).
	OrderlySuspend time.Duration
	// Broadcasting must be set when the push consumer runs with
	// consumer.WithConsumerModel(consumer.BroadCasting), which the middleware cannot see.
	// Every instance then applies every message: identities are scoped by Instance, and a
	// failed message is retried in place (the client drops what a broadcasting concurrent
	// consumer returns for retry). Defaults to false: clustering.
	Broadcasting bool
	// Instance names this consumer instance in broadcasting mode (a host name or pod name,
	// stable across restarts). Required when Broadcasting is set.
	Instance string
	// BroadcastRetry is the first delay between in-place retries in broadcasting mode; it
	// doubles up to a minute. Defaults to DefaultBroadcastRetry (1s).
	BroadcastRetry time.Duration
	// Registerer, when set, receives outbox_consumer_duplicates_total{group, topic, tag,
	// same_body}: the deliveries skipped as duplicates, by the parts of their identity (the
	// topic without its namespace), and
	// whether the body was that of the first delivery ("true", "false": a distinct event
	// shares the identity, "unknown": the store keeps no fingerprint, as SQLGuard's).
	// Middlewares may share a Registerer. Defaults to nil: no metric.
	Registerer prometheus.Registerer
	// TracerProvider, when set, records an OpenTelemetry consumer span "<topic> process"
	// around each attempt at a message, a child of the traceparent in its properties (the
	// relay's producer span), and passes the span's context to the handler. Defaults to nil:
	// no spans, no cost.
	TracerProvider trace.TracerProvider
}

func (c *Config) setDefaults() {
	if c.Key == nil {
		c.Key = KeyFromKeys()
	}
	if c.Identity == nil {
		c.Identity = TopicTagIdentity
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.OrderlySuspend == 0 {
		c.OrderlySuspend = DefaultOrderlySuspend
	}
	if c.BroadcastRetry == 0 {
		c.BroadcastRetry = DefaultBroadcastRetry
	}
	if c.OnInvalid == nil {
		log := c.Logger
		c.OnInvalid = func(ctx context.Context, msg *primitive.MessageExt, err error) error {
			log.ErrorContext(ctx, "message not applied: no usable idempotency key; acknowledged",
				msgAttrs(msg, slog.String("error", err.Error()))...)
			return nil
		}
	}
}

func (c *Config) validate() error {
	switch {
	case c.MissingKey != MissingKeyReject && c.MissingKey != MissingKeyUseMsgID:
		return fmt.Errorf("rocketmqmw: Config.MissingKey: unknown policy %d", int(c.MissingKey))
	case c.OrderlySuspend < 10*time.Millisecond || c.OrderlySuspend > 30*time.Second:
		return fmt.Errorf("rocketmqmw: Config.OrderlySuspend must be within [10ms, 30s], got %s", c.OrderlySuspend)
	case c.BroadcastRetry < time.Millisecond:
		return fmt.Errorf("rocketmqmw: Config.BroadcastRetry must be at least 1ms, got %s", c.BroadcastRetry)
	case c.Broadcasting && c.Instance == "":
		return errors.New("rocketmqmw: Config.Instance is required when Config.Broadcasting is set")
	}
	return nil
}

// Middleware is a rocketmq-client-go push-consumer callback (Consume) that applies each
// message's effect once per identity through an idempotency guard. It is safe for
// concurrent use; create one per Subscribe.
type Middleware struct {
	cfg    Config
	group  string
	dups   *prometheus.CounterVec // nil without Config.Registerer
	do     doFunc
	tracer trace.Tracer    // nil without Config.TracerProvider
	base   context.Context // cancelled by Close
	cancel context.CancelFunc
	once   sync.Once
}

// doFunc runs the effect of msg under identity id through a guard.
type doFunc func(ctx context.Context, id string, msg *primitive.MessageExt) (idempotency.Result, error)

// New returns a Middleware that runs handler once per identity through g, whose state is
// kept in a Store (Redis): for effects outside the consumer's database.
func New(g *idempotency.Guard, cfg Config, handler Handler) (*Middleware, error) {
	if g == nil || handler == nil {
		return nil, errors.New("rocketmqmw: New: nil Guard or handler")
	}
	return newMiddleware(cfg, g.Group(), func(ctx context.Context, id string, msg *primitive.MessageExt) (idempotency.Result, error) {
		return g.DoWithFingerprint(ctx, id, fingerprint(msg.Body), func(ctx context.Context) error { return handler(ctx, msg) })
	})
}

// NewTx returns a Middleware that runs handler with the effect and its dedupe row in one
// transaction of db, through g (see idempotency.SQLGuard.Do). A concurrent duplicate
// waits for the first transaction and then is a duplicate.
func NewTx(g *idempotency.SQLGuard, db idempotency.Beginner, cfg Config, handler TxHandler) (*Middleware, error) {
	if g == nil || db == nil || handler == nil {
		return nil, errors.New("rocketmqmw: NewTx: nil SQLGuard, database or handler")
	}
	return newMiddleware(cfg, g.Group(), func(ctx context.Context, id string, msg *primitive.MessageExt) (idempotency.Result, error) {
		return g.DoWithFingerprint(ctx, db, id, fingerprint(msg.Body), func(ctx context.Context, tx *sql.Tx) error { return handler(ctx, tx, msg) })
	})
}

func newMiddleware(cfg Config, group string, do doFunc) (*Middleware, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var dups *prometheus.CounterVec
	if cfg.Registerer != nil {
		dups = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbox_consumer_duplicates_total",
			Help: "Deliveries skipped as duplicates, by the parts of their identity and whether the body was the first delivery's.",
		}, []string{"group", "topic", "tag", "same_body"})
		if err := cfg.Registerer.Register(dups); err != nil {
			are, ok := err.(prometheus.AlreadyRegisteredError)
			if !ok {
				return nil, fmt.Errorf("rocketmqmw: register the duplicates metric: %w", err)
			}
			dups = are.ExistingCollector.(*prometheus.CounterVec)
		}
	}
	base, cancel := context.WithCancel(context.Background())
	return &Middleware{cfg: cfg, group: group, dups: dups, do: do, tracer: msgtrace.Tracer(cfg.TracerProvider), base: base, cancel: cancel}, nil
}

// fingerprint is a digest of a body, kept with a consumed key to tell a redelivery from a
// distinct event of the same identity.
func fingerprint(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:16])
}

// duplicate reports a delivery skipped as a duplicate: at debug level, or at warn level when
// its body differs from the first delivery's (a distinct event that shares the identity:
// the identity lacks what tells the events apart), and in the metric.
func (m *Middleware) duplicate(ctx context.Context, msg *primitive.MessageExt, id string, res idempotency.Result) {
	same := "unknown"
	if res.FirstFingerprint != "" {
		same = strconv.FormatBool(res.FirstFingerprint == fingerprint(msg.Body))
	}
	if m.dups != nil {
		m.dups.WithLabelValues(m.group, TopicWithoutNamespace(msg.Topic), msg.GetTags(), same).Inc()
	}
	if same == "false" {
		m.cfg.Logger.WarnContext(ctx, "message skipped as a duplicate, but its body differs from the first delivery's: "+
			"a distinct event shares its identity (group, topic, tag, keys); give each event its own tag or keys",
			msgAttrs(msg, slog.String("identity", id), slog.String("first_fingerprint", res.FirstFingerprint), slog.String("fingerprint", fingerprint(msg.Body)))...)
		return
	}
	m.cfg.Logger.DebugContext(ctx, "duplicate skipped", msgAttrs(msg, slog.String("identity", id), slog.String("same_body", same))...)
}

// Close cancels the context of running handlers and makes later deliveries return for
// redelivery without calling the handler. Call it on shutdown, before the push consumer's
// Shutdown. It is safe to call more than once.
func (m *Middleware) Close() { m.once.Do(m.cancel) }

// Consume is the push-consumer callback: pass it to Subscribe.
//
// Each message of a batch is decided on its own: applied and duplicate messages are
// acknowledged; failed and in-progress ones (and, after Close, the rest) are to be
// redelivered, and messages without a usable key follow Config.MissingKey. A panic in the
// handler is recovered, logged at error level with the message's id, and the message is
// redelivered.
//
// In concurrent mode the callback returns ConsumeRetryLater when any message is to be
// redelivered: the client sends the batch back, the broker redelivers it through
// %RETRY%<group> and, after the group's maximum reconsume times (16 by default), moves it
// to %DLQ%<group>; the messages applied in this call come back as duplicates. In orderly
// mode (consumer.WithConsumerOrder(true), seen in the context) it stops at the first such
// message and returns SuspendCurrentQueueAMoment: the client retries the batch in place
// after Config.OrderlySuspend, so the later messages of the queue wait and order is kept.
// An orderly consumer retries without limit unless consumer.WithMaxReconsumeTimes is set,
// after which the client moves the message to %DLQ%<group>. In broadcasting mode see
// Config.Broadcasting. It never returns ConsumeSuccess with an error.
func (m *Middleware) Consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.base, cancel)()
	if m.base.Err() != nil {
		cancel() // closed already: AfterFunc would cancel only later, in its own goroutine
	}

	orderly, isOrderly := primitive.GetOrderlyCtx(ctx)
	var errs []error
	retry := false
	for _, msg := range msgs {
		if msg == nil {
			continue
		}
		err := m.decide(hctx, msg, !isOrderly)
		if err == nil {
			continue
		}
		retry = true
		if !errors.Is(err, idempotency.ErrInProgress) {
			errs = append(errs, err)
		}
		if isOrderly {
			// The later messages of this queue must not overtake this one.
			orderly.SuspendCurrentQueueTimeMillis = int(m.cfg.OrderlySuspend / time.Millisecond)
			return consumer.SuspendCurrentQueueAMoment, errors.Join(errs...)
		}
	}
	if retry {
		return consumer.ConsumeRetryLater, errors.Join(errs...)
	}
	return consumer.ConsumeSuccess, nil
}

// decide returns nil to acknowledge msg and an error to have it redelivered. In
// broadcasting concurrent mode (inPlace) it retries a failure itself until it succeeds or
// the middleware is closed, since the client would drop it.
func (m *Middleware) decide(ctx context.Context, msg *primitive.MessageExt, inPlace bool) error {
	inPlace = inPlace && m.cfg.Broadcasting
	delay := m.cfg.BroadcastRetry
	for {
		if err := ctx.Err(); err != nil {
			if m.cfg.Broadcasting {
				m.cfg.Logger.ErrorContext(ctx, "consumer closing: message not applied; a broadcasting consumer redelivers it only after a restart",
					msgAttrs(msg)...)
			}
			return fmt.Errorf("message %s not applied: %w", msg.MsgId, err)
		}
		err := m.one(ctx, msg)
		if err == nil || !inPlace {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
		delay = min(2*delay, time.Minute)
	}
}

// one makes one attempt at msg: nil to acknowledge it, an error to have it redelivered.
func (m *Middleware) one(ctx context.Context, msg *primitive.MessageExt) (err error) {
	ctx, span := m.startSpan(ctx, msg) // tracing.go; free when tracing is off
	defer func() { endSpan(span, err) }()
	key, kerr := m.key(msg)
	if kerr != nil {
		return m.invalid(ctx, msg, kerr)
	}
	id := m.cfg.Identity(msg, key)
	if m.cfg.Broadcasting {
		id = m.cfg.Instance + "@" + id
	}
	id = fitKey(id)

	defer func() {
		if p := recover(); p != nil {
			m.cfg.Logger.ErrorContext(ctx, "handler panicked; message will be redelivered",
				msgAttrs(msg, slog.String("identity", id), slog.Any("panic", p), slog.String("stack", string(debug.Stack())))...)
			err = fmt.Errorf("message %s (identity %q): handler panicked: %v", msg.MsgId, id, p)
		}
	}()
	res, err := m.do(ctx, id, msg)
	recordOutcome(span, res)
	switch {
	case err == nil && res.Outcome == idempotency.Duplicate:
		m.duplicate(ctx, msg, id, res)
		return nil
	case err == nil:
		if res.NotRecorded != nil {
			m.cfg.Logger.ErrorContext(ctx, "message applied but not recorded as consumed; acknowledged",
				msgAttrs(msg, slog.String("identity", id), slog.String("error", res.NotRecorded.Error()))...)
		}
		return nil
	case errors.Is(err, idempotency.ErrInProgress):
		return err
	case errors.Is(err, idempotency.ErrNoKey) || errors.Is(err, idempotency.ErrInvalidKey):
		return m.invalid(ctx, msg, err)
	}
	m.cfg.Logger.WarnContext(ctx, "message failed; will be redelivered",
		msgAttrs(msg, slog.String("identity", id), slog.String("error", err.Error()))...)
	return fmt.Errorf("message %s (identity %q): %w", msg.MsgId, id, err)
}

func (m *Middleware) key(msg *primitive.MessageExt) (string, error) {
	key, err := m.cfg.Key(msg)
	if err == nil && key == "" {
		err = idempotency.ErrNoKey
	}
	if err == nil {
		return key, nil
	}
	if m.cfg.MissingKey == MissingKeyUseMsgID && errors.Is(err, idempotency.ErrNoKey) && msg.MsgId != "" {
		return msg.MsgId, nil
	}
	return "", err
}

func (m *Middleware) invalid(ctx context.Context, msg *primitive.MessageExt, reason error) error {
	if err := m.cfg.OnInvalid(ctx, msg, reason); err != nil {
		return fmt.Errorf("message %s rejected (%v), OnInvalid: %w", msg.MsgId, reason, err)
	}
	return nil
}

// msgAttrs names a message in a log line: topic, tag, id, keys, queue offset and how many
// times it was redelivered.
func msgAttrs(msg *primitive.MessageExt, extra ...any) []any {
	attrs := []any{
		slog.String("topic", msg.Topic), slog.String("tag", msg.GetTags()), slog.String("msg_id", msg.MsgId),
		slog.String("keys", msg.GetKeys()), slog.Int64("queue_offset", msg.QueueOffset),
		slog.Int("reconsume_times", int(msg.ReconsumeTimes)),
	}
	return append(attrs, extra...)
}
