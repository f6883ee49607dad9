// SPDX-License-Identifier: Apache-2.0

// Package rocketmqmw is the rocketmq-client-go (v2) push-consumer middleware of package
// idempotency: a Middleware wraps a per-message handler into the callback passed to
// Subscribe, and applies each event once through an idempotency.Guard (Redis) or
// idempotency.SQLGuard (the consumer's database).
//
// Each message's identity is the guard's group + topic + tag + keys by default (Config.Key
// and Config.Identity change it), so a redelivered event is skipped while another event of
// the same order is applied. See package idempotency on choosing the key. The topic is
// taken without its namespace: a consumer created with consumer.WithNamespace is handed
// msg.Topic as "namespace%topic", and its identities are those of a consumer without it.
//
// What it does in each consumer mode, as rocketmq-client-go v2.1.2 behaves (read in its
// source and checked in this package's tests with the real client):
//
//   - Concurrent (the default): a message to redeliver makes the callback return
//     ConsumeRetryLater; the client sends it back, the broker redelivers it through
//     %RETRY%<group> and moves it to %DLQ%<group> after the group's maximum reconsume
//     times (16 by default, consumer.WithMaxReconsumeTimes).
//   - Orderly (consumer.WithConsumerOrder(true)): the client ignores ConsumeRetryLater there
//     and would commit the offset past the message at the next success, losing it. The
//     middleware returns SuspendCurrentQueueAMoment instead, stopping at the first message
//     to redeliver: the queue waits Config.OrderlySuspend and the message is retried in
//     place, the later ones of the queue behind it. The client retries without limit
//     unless consumer.WithMaxReconsumeTimes is set: after max+2 attempts (the client counts
//     its retries locally) it moves the message to %DLQ%<group> and goes on with the next.
//   - Broadcasting (consumer.WithConsumerModel(consumer.BroadCasting)): every instance must
//     apply every message, and the client drops what a concurrent callback returns for
//     retry. The middleware cannot see the mode: set Config.Broadcasting and
//     Config.Instance. Identities are then scoped by instance, and failures are retried
//     in place until they succeed or the middleware is closed.
//
// Orderly consumers stall when queues change hands. The client (the pinned main-branch
// pseudo-version of rocketmq-client-go, as v2.1.2) unlocks its queues on the broker only in
// the push consumer's Shutdown, never when a rebalance takes a queue away from it. A queue
// that moves because an instance joined the group (a scale-up, a restarted pod coming
// back) therefore stops until the broker's lock expires (60 s after the previous owner's
// last renewal, the broker's rocketmq.broker.rebalance.lockMaxLiveTime) and the new owner's
// next rebalance (every 20 s) locks it. Measured with two instances of an orderly group
// behind this middleware (BenchmarkOrderlyRebalanceStall), from the change until every
// message sent right after it was consumed:
//
//	broker                    an instance joins    an instance calls Shutdown
//	rmqtest                   63 s                 3.0 s
//	Apache RocketMQ 5.3.3     63 s                 3.0 s
//
// So stop instances with Middleware.Close and then the push consumer's Shutdown (on
// SIGTERM, within the pod's termination grace period): its queues move in seconds. An
// instance killed without Shutdown keeps its locks until they expire (not measured), like one that gives
// queues up. Each instance that joins costs the queues it takes about a minute; a rolling
// restart pays it once per pod. The middleware cannot shorten it (it never sees a
// rebalance). Concurrent consumers take no locks and do not stall.
//
// A panic in the handler is recovered: the guard releases its claim (or rolls back), a
// line at error level names the message (topic, tag, msg_id, keys, reconsume times) with
// the stack, and the message is redelivered like a failure, ending in the DLQ if it always
// panics. Without this the client swallows the panic and neither acknowledges nor sends
// back the message, pinning its queue's offset.
//
// The handler's context is cancelled by Middleware.Close (the client itself passes
// context.Background()): call Close on shutdown, before the push consumer's Shutdown.
//
// Messages without a key are never applied under a made-up key; see MissingKeyPolicy.
//
// With Config.TracerProvider set, each attempt at a message runs in an OpenTelemetry consumer
// span "<topic> process", a child of the W3C traceparent in the message's properties (the
// relay's producer span, itself a child of the writer's), and the handler's context carries
// it: one trace from the writer's transaction to the consumer's effect.
package rocketmqmw
