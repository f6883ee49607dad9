package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/rs/zerolog"
)

// Handler applies the business effect of one message.
type Handler func(ctx context.Context, msg *primitive.MessageExt) error

// TxHandler applies the business effect of one message through tx, the transaction that
// also records the message as consumed. It must not commit or roll back tx.
type TxHandler func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error

// ConsumeFunc is the callback of a rocketmq-client-go push consumer, as passed to
// (consumer.PushConsumer).Subscribe.
type ConsumeFunc = func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error)

// MissingKeyPolicy says what the middleware does with a message that has no idempotency key.
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
// key; err wraps ErrNoKey or ErrInvalidKey. Returning nil acknowledges the message;
// returning an error asks the broker to redeliver it, which after the consumer's maximum
// reconsume times (16 by default) moves it to the group's dead-letter queue %DLQ%<group>.
// It may be called more than once for one message: the broker redelivers a whole batch when
// another message of the batch must be retried.
type InvalidFunc func(ctx context.Context, msg *primitive.MessageExt, err error) error

// RocketMQConfig configures the push-consumer middleware.
type RocketMQConfig struct {
	// Key extracts the idempotency key of a message. Defaults to KeyFromKeys().
	Key KeyFunc
	// MissingKey is the policy for messages without a key. Defaults to MissingKeyReject.
	MissingKey MissingKeyPolicy
	// OnInvalid is called for every message rejected for want of a usable key. Defaults to
	// logging the message's topic, id, keys and the reason at error level on Logger, and
	// acknowledging it (the broker keeps the message, which can be looked up by id).
	OnInvalid InvalidFunc
	// Logger receives a line per rejected message, per applied message whose key could not
	// be recorded, and per failed message (at warn level). Defaults to a logger on stderr,
	// so that a rejected message is never silent.
	Logger *zerolog.Logger
}

func (c *RocketMQConfig) setDefaults() {
	if c.Key == nil {
		c.Key = KeyFromKeys()
	}
	if c.Logger == nil {
		l := zerolog.New(os.Stderr).With().Timestamp().Str("component", "idempotency").Logger()
		c.Logger = &l
	}
	if c.OnInvalid == nil {
		log := c.Logger
		c.OnInvalid = func(_ context.Context, msg *primitive.MessageExt, err error) error {
			log.Error().Err(err).Str("topic", msg.Topic).Str("msg_id", msg.MsgId).
				Str("keys", msg.GetKeys()).Int64("queue_offset", msg.QueueOffset).
				Msg("message not applied: no usable idempotency key; acknowledged")
			return nil
		}
	}
}

func (c *RocketMQConfig) validate() error {
	if c.MissingKey != MissingKeyReject && c.MissingKey != MissingKeyUseMsgID {
		return fmt.Errorf("idempotency: RocketMQConfig.MissingKey: unknown policy %d", int(c.MissingKey))
	}
	return nil
}

// WrapRocketMQ returns a push-consumer callback that runs handler once per key through g.
//
// Each message of a batch is decided on its own: Applied and Duplicate messages are
// acknowledged, InProgress and Failed ones are to be redelivered, and messages without a
// usable key follow cfg.MissingKey. The callback returns ConsumeSuccess when every message is
// acknowledged and ConsumeRetryLater (with the errors joined) when any is to be redelivered.
// rocketmq-client-go v2 then redelivers the whole batch, so the messages applied in this
// call come back and are skipped as Duplicate: correct, at the price of a claim each. Set
// consumer.WithConsumeMessageBatchMaxSize(1), its default, to avoid that. The callback
// never returns ConsumeSuccess with an error: the client would acknowledge the batch.
func WrapRocketMQ(g *Guard, cfg RocketMQConfig, handler Handler) (ConsumeFunc, error) {
	if g == nil || handler == nil {
		return nil, errors.New("idempotency: WrapRocketMQ: nil Guard or handler")
	}
	return wrap(cfg, func(ctx context.Context, key string, msg *primitive.MessageExt) (Outcome, error) {
		return g.Do(ctx, key, func(ctx context.Context) error { return handler(ctx, msg) })
	})
}

// WrapRocketMQTx is WrapRocketMQ with the effect and its dedupe row in one transaction of
// db, through g (see SQLGuard.Do): the handler receives the transaction. InProgress does not
// occur: a concurrent duplicate waits for the first transaction and then is a Duplicate.
func WrapRocketMQTx(g *SQLGuard, db Beginner, cfg RocketMQConfig, handler TxHandler) (ConsumeFunc, error) {
	if g == nil || db == nil || handler == nil {
		return nil, errors.New("idempotency: WrapRocketMQTx: nil SQLGuard, database or handler")
	}
	return wrap(cfg, func(ctx context.Context, key string, msg *primitive.MessageExt) (Outcome, error) {
		return g.Do(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error { return handler(ctx, tx, msg) })
	})
}

type doFunc func(ctx context.Context, key string, msg *primitive.MessageExt) (Outcome, error)

func wrap(cfg RocketMQConfig, do doFunc) (ConsumeFunc, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &middleware{cfg: cfg, do: do}
	return m.consume, nil
}

type middleware struct {
	cfg RocketMQConfig
	do  doFunc
}

func (m *middleware) consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	var errs []error
	retry := false
	for _, msg := range msgs {
		if msg == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			// Shutting down: what is left comes back in the redelivered batch.
			return consumer.ConsumeRetryLater, errors.Join(append(errs, err)...)
		}
		if err := m.one(ctx, msg); err != nil {
			retry = true
			if !errors.Is(err, errInProgress) {
				errs = append(errs, err)
			}
		}
	}
	if retry {
		return consumer.ConsumeRetryLater, errors.Join(errs...)
	}
	return consumer.ConsumeSuccess, nil
}

// errInProgress marks a message to redeliver without an error to report.
var errInProgress = errors.New("in progress")

// one decides a message: nil to acknowledge it, an error to have it redelivered.
func (m *middleware) one(ctx context.Context, msg *primitive.MessageExt) error {
	key, err := m.key(msg)
	if err != nil {
		return m.invalid(ctx, msg, err)
	}
	out, err := m.do(ctx, key, msg)
	switch out {
	case Applied:
		if err != nil {
			m.cfg.Logger.Error().Err(err).Str("topic", msg.Topic).Str("msg_id", msg.MsgId).Str("key", key).
				Msg("message applied but not recorded as consumed; acknowledged")
		}
		return nil
	case Duplicate:
		return nil
	case InProgress:
		return errInProgress
	}
	if errors.Is(err, ErrNoKey) || errors.Is(err, ErrInvalidKey) {
		return m.invalid(ctx, msg, err)
	}
	m.cfg.Logger.Warn().Err(err).Str("topic", msg.Topic).Str("msg_id", msg.MsgId).Str("key", key).
		Msg("message failed; will be redelivered")
	return fmt.Errorf("message %s (key %q): %w", msg.MsgId, key, err)
}

func (m *middleware) key(msg *primitive.MessageExt) (string, error) {
	key, err := m.cfg.Key(msg)
	if err == nil && key == "" {
		err = ErrNoKey
	}
	if err == nil {
		return key, nil
	}
	if m.cfg.MissingKey == MissingKeyUseMsgID && errors.Is(err, ErrNoKey) && msg.MsgId != "" {
		return msg.MsgId, nil
	}
	return "", err
}

func (m *middleware) invalid(ctx context.Context, msg *primitive.MessageExt, reason error) error {
	if err := m.cfg.OnInvalid(ctx, msg, reason); err != nil {
		return fmt.Errorf("message %s rejected (%v), OnInvalid: %w", msg.MsgId, reason, err)
	}
	return nil
}
