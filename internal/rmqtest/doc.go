// SPDX-License-Identifier: Apache-2.0

// Package rmqtest is an in-process Apache RocketMQ name server and broker that speak
// RocketMQ's remoting protocol over TCP, so that the real
// github.com/apache/rocketmq-client-go/v2 (v2.1.2) producer and push consumer can be
// tested, and the demo run, on a machine without a RocketMQ installation.
//
// Start a Server, point clients at NameServerAddr, then assert on what the broker
// stored (Messages, QueueMessages, WaitMessages, Count) and on what consumers received.
// Faults (broker errors, latency, connections dropped before or after the store, a
// broker outage with StopBroker/StartBroker) can be switched on and off while clients
// are running, globally or per topic, with a seedable random source.
//
// What it does, as a RocketMQ 4.x broker does:
//   - routes: every valid topic is created on first use (route query, send, heartbeat
//     or pull) with Options.Queues queues, on one master broker (id 0, read+write);
//     %RETRY% and %DLQ% topics get one queue; with Options.NoAutoCreateTopics only topics
//     made by CreateTopic or UPDATE_AND_CREATE_TOPIC (the client's admin API) exist, as with
//     RocketMQ's autoCreateTopicEnable=false;
//   - sends: SEND_MESSAGE, SEND_MESSAGE_V2 (one-letter header names) and
//     SEND_BATCH_MESSAGE (the batch body split into messages, each keeping its own
//     properties); the queue the client chose is honoured, so queue selectors give
//     ordered sends; sends on one connection are handled in arrival order;
//   - push consumers in clustering mode: heartbeats and consumer lists (with
//     NOTIFY_CONSUMER_IDS_CHANGED so groups rebalance at once), consumer offsets,
//     max/min offset and search by time, long-polling pulls, ordered-consumption queue
//     locks, and CONSUMER_SEND_MSG_BACK so ConsumeRetryLater redelivers through
//     %RETRY%group with reconsume count 1, 2, ... and then %DLQ%group;
//   - transactional messages as RocketMQ 5.3 handles them: a send with TRAN_MSG=true is a
//     half, stored invisible in RMQ_SYS_TRANS_HALF_TOPIC; END_TRANSACTION (checked against
//     the half's PGROUP and offsets, no fence against a second COMMIT) stores the real
//     message or rolls it back; producer groups registered by HEART_BEAT get
//     CHECK_TRANSACTION_STATE round robin, each check raising TRANSACTION_CHECK_TIMES and
//     appending a copy, with the discard to TRANS_CHECK_MAX_TIME_TOPIC after
//     Options.TransactionCheckMax; rounds run every Options.TransactionCheckInterval or on
//     TriggerCheck; TxFaults lose ENDs, checks, or op records on a restart;
//   - lost acknowledged messages, by fault injection (loss.go): TruncateQueue drops a
//     queue's tail, DropQueueHead its head, Failover replaces the store with an older
//     Snapshot under the same name and address;
//   - JSON and RocketMQ binary headers read (internal/remoting/frame); everything
//     written is JSON, or binary with Options.BinaryHeaders;
//   - unknown request codes get a REQUEST_CODE_NOT_SUPPORTED response (logged once).
//
// Its limits, plainly:
//   - in memory only: nothing is durable, nothing is deleted but by the fault injection of
//     loss.go, memory grows with every message; one master broker per Server (StartCluster
//     puts several behind shared name servers), no slaves; TLS only for a single Server
//     (Options.TLS); ACL only as a
//     check of 4.x-style request signatures (Options.Credentials), without permissions;
//   - delay levels (the DELAY property and retry back-off) are recorded, not waited
//     for: a delayed message is visible at once, and a sent-back message is
//     redelivered after Options.RetryDelay (default: at once), not after 10s, 30s, ...;
//   - no server-side tag or SQL filtering (the client filters tags itself), no
//     request/reply, no message query by key or id,
//     no admin commands but topic creation (SetBrokerPermission and SetMaxMessageSize
//     stand for updateBrokerConfig);
//   - a consumer group that never committed an offset starts at offset 0 of every
//     queue, as a fresh RocketMQ broker answers;
//   - it is meant for tests and the demo only, never for production.
package rmqtest
