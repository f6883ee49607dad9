// SPDX-License-Identifier: Apache-2.0

// Package idempotency turns the relay's at-least-once delivery into an exactly-once
// business effect on the consumer side.
//
// The relay publishes a row, then marks it sent; a lost broker ack, a relay restart between
// the two, or a broker redelivery after a consumer timeout all deliver the same message
// again. The consumer therefore gives each event an identity and applies the effect only
// for the first delivery of an identity. Per delivery Do returns a Result and an error:
//
//   - Applied (nil error): the effect ran now. Acknowledge. If the key could not be
//     recorded afterwards, Result.NotRecorded says why; the message is still acknowledged.
//   - Duplicate (nil error): the identity was consumed before. Acknowledge and skip.
//   - InProgress (ErrInProgress): another consumer is applying it right now. Redeliver
//     later; if that consumer fails, the redelivery applies the effect.
//   - Failed (the error): the effect did not happen. Redeliver.
//
// So the error is non-nil exactly when the message must be redelivered, and the usual
// "if err != nil { retry }" never applies an effect twice.
//
// # Choosing the key: never merge two events
//
// Idempotency is keyed by the order number, but the order number alone is not an event's
// identity: "created" and "paid" of order SN-7001 are two events, and keying both by
// SN-7001 would skip "paid" as a duplicate of "created". The identity must contain
// everything that makes an event distinct and nothing that changes on a redelivery. The
// RocketMQ middleware (idempotency/rocketmqmw) uses group + topic + tag + keys by default:
// the guard's Group, the message's topic and tag, and all of its keys (the relay sends the
// outbox row's msg_keys there). Put a second key into msg_keys when one topic and tag can
// carry several events of one order (partial payments: "SN-7001 PAY-2"). Never use
// something that differs between deliveries of one event (the broker's message id differs
// when the relay republishes after a lost ack; a timestamp in the body). Calling Do
// directly, build the key the same way, such as "orders:paid:SN-7001".
//
// # Two guards
//
// SQLGuard keeps the key in the consumer's own database: it inserts a row into a dedupe
// table (schema.DedupeDDL) in the same transaction as the effect, so the effect and the
// record of it commit or roll back together. A duplicate key means Duplicate; a concurrent
// duplicate waits on the row lock and then sees the row. This is exactly once with no
// window, survives any crash and does not need Redis: use it whenever the effect is a write
// to a MySQL or MariaDB database (stock, balances, payments). Do opens the transaction;
// DoTx joins one the caller already has, so that other writes (an outbox row for the next
// step) commit with it.
//
// Guard keeps the key in a Store, RedisStore by default, for effects outside a database
// transaction (calling another service, writing to several systems). A delivery claims the
// key (SET key consuming:<token> NX PX ClaimTTL); when the handler succeeds the key becomes
// "consumed" for Retention, when it fails or panics the claim is released so that a
// redelivery can retry. Finishing and releasing compare the token, so a consumer that
// stalled past its claim TTL cannot mark someone else's work consumed or free it: it gets
// ErrClaimLost. The store is a courtesy, not a fence: a handler that outlives ClaimTTL may
// run the effect a second time in parallel with the consumer that took over, and a
// duplicate arriving after Retention is applied again. Choose ClaimTTL well above the
// slowest handler (default 5 minutes) and Retention above the longest replay window
// (default 72 hours).
//
// What Redis may do to exactly once: every consumed key has a TTL, so a maxmemory-policy
// other than noeviction (volatile-lru is managed Redis's usual default) evicts consumed keys
// when memory runs short; a restart without persistence (no appendonly, no RDB) forgets them
// all, and an RDB-only server the last minutes'; replication is asynchronous, so a failover
// may lose the keys written just before it. In each case a redelivery arriving afterwards is
// applied again. A RedisStore checks eviction and persistence before its first claim and every
// minute after, and refuses to claim on an unsafe server (RedisConfig.AllowUnsafe turns that
// into a warning); OpenRedisStore checks at once. Nothing removes the failover window. For money, use SQLGuard.
//
// A Duplicate is logged at debug level by the middleware and counted in
// outbox_consumer_duplicates_total (rocketmqmw.Config.Registerer). RedisStore keeps a
// fingerprint of the first delivery's body beside a consumed key, so that a duplicate whose
// body differs, a distinct event that shares the identity of an earlier one, is logged at
// warn level: its identity lacks what tells the events apart (see TopicTagIdentity).
//
// # RocketMQ
//
// The push-consumer middleware is in idempotency/rocketmqmw, so that this package does not
// import rocketmq-client-go. It handles concurrent and orderly consumers (an orderly queue
// is suspended and the message retried in place, never skipped), recovers handler panics
// and cancels handlers' contexts on shutdown; broadcasting consumers must say so in its
// Config.
package idempotency
