// Package idempotency turns the relay's at-least-once delivery into an exactly-once
// business effect on the consumer side.
//
// The relay publishes a row, then marks it sent; a lost broker ack, a relay restart between
// the two, or a broker redelivery after a consumer timeout all deliver the same message
// again. The consumer therefore keys each message by a business identity (the order number:
// seed 002's @Idempotent stock consumer keys by orderSn) and applies the effect only for the
// first delivery of a key. Per delivery there are three outcomes:
//
//   - Applied: the effect ran now. Acknowledge.
//   - Duplicate: the key was consumed before. Acknowledge and skip.
//   - InProgress: another consumer is applying it right now. Ask for redelivery later; if
//     that consumer fails, the redelivery applies the effect.
//
// and Failed (the effect did not happen, with an error: ask for redelivery).
//
// # Two guards
//
// SQLGuard keeps the key in the consumer's own database: it inserts a row into a dedupe
// table (schema.DedupeDDL) in the same transaction as the effect, so the effect and the
// record of it commit or roll back together. A duplicate key means Duplicate; a concurrent
// duplicate waits on the row lock and then sees the row. This is exactly once with no
// window, survives any crash and does not need Redis: use it whenever the effect is a write
// to a MySQL or MariaDB database (stock, balances, payments).
//
// Guard keeps the key in a Store, RedisStore by default, for effects outside a database
// transaction (calling another service, writing to several systems). A delivery claims the
// key (SET key consuming:<token> NX PX ClaimTTL); when the handler succeeds the key becomes
// "consumed" for Retention, when it fails the claim is released so that a redelivery can
// retry. Finishing and releasing compare the token, so a consumer that stalled past its
// claim TTL cannot mark someone else's work consumed or free it: it gets ErrClaimLost. The
// store is a courtesy, not a fence: a handler that outlives ClaimTTL may run the effect a
// second time in parallel with the consumer that took over, and a duplicate arriving after
// Retention is applied again. Choose ClaimTTL well above the slowest handler (default 5
// minutes) and Retention above the longest replay window (default 72 hours).
//
// # RocketMQ
//
// WrapRocketMQ and WrapRocketMQTx turn a per-message handler into the callback of a
// rocketmq-client-go push consumer. The key comes from a KeyFunc: the message's first key
// (KeyFromKeys, the default; the relay sends the outbox row's msg_keys there), a user
// property (KeyFromProperty) or a JSON field of the body (KeyFromJSONField). Each message of
// a batch is decided on its own; if any must be redelivered the callback returns
// ConsumeRetryLater, the client redelivers the whole batch, and the messages applied in the
// first pass come back as duplicates and are skipped.
//
// # Messages without a key
//
// A message without a key cannot be deduplicated, so it is never applied under the default
// policy, MissingKeyReject: the handler is not called, RocketMQConfig.OnInvalid is, and the
// message is acknowledged. A payment consumer cannot afford either of the alternatives:
// applying it (a redelivery would charge twice) or retrying it (no redelivery will ever
// give it a key; it would cycle through 16 retries into the dead-letter queue, taking its
// batch with it each time). The default OnInvalid logs the topic, message id and keys at
// error level, so the operator is told and can look the message up in the broker; an
// OnInvalid that parks the message somewhere (a quarantine table) can return an error when
// parking fails, and the message is then redelivered instead of dropped. MissingKeyUseMsgID
// keys such messages by their message id for consumers that accept its weaker guarantee.
//
// # Example
//
//	guard, _ := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock-reduce"})
//	consume, _ := idempotency.WrapRocketMQTx(guard, db, idempotency.RocketMQConfig{},
//		func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
//			_, err := tx.ExecContext(ctx, "UPDATE time_period SET stock = stock - 1 WHERE id = ? AND stock > 0", id)
//			return err
//		})
//	_ = pushConsumer.Subscribe("venue_topic", consumer.MessageSelector{}, consume)
package idempotency
