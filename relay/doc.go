// SPDX-License-Identifier: Apache-2.0

// Package relay is the delivery engine: it publishes every committed outbox row to RocketMQ
// at least once, retries failures on a backoff schedule, and parks what cannot be delivered
// as dead for an operator.
//
// One Relay serves one table. While it holds the table's Redis lock it repeatedly reads the
// due rows (status pending or failed, next_retry_time passed, not deleted) in pages that walk
// the (status, next_retry_time) index, so a tick costs in proportion to the due rows and not
// to the table's history of sent rows. Each page is routed (Router), published with bounded
// concurrency (Publisher; messages of one topic go in batch requests where the route
// allows), and its results written back with a few set-based, status-guarded UPDATEs.
//
// The lock is a courtesy, not a fence: every write is conditional on the row still being
// pending or failed, so two relays at once can only publish a row twice, never lose it or
// overwrite a newer state. Consumers dedupe with package idempotency.
//
// One row's path, file by file, from scan to write-back (the packages: relay/message, the
// types shared with publishers; relay/rocketmq, the RocketMQ adapter; internal/outboxsql,
// every statement against the table; relay/internal/pipeline, the engine, one file per stage,
// its Engine built by New from Config):
//  1. leader.go (Run, lead): while the lock is held (internal/lease: Take, Extend, Valid,
//     Release), each pass calls Engine.Drain (pipeline/drain.go).
//  2. pipeline/scan.go (scan, ReadPage): reads the due rows a page at a time with the page
//     query of internal/outboxsql/store.go (Store.PageQuery), each an outboxsql.Row, within
//     the memory budget (pipeline/budget.go).
//  3. pipeline/drain.go (processPage) and pipeline/prepare.go (prepareItems, prepare,
//     routeOf): the Row becomes a message.Message with its message.Route (relay/message); a
//     malformed row fails here, to be written back dead, and a row behind a head an earlier
//     page of the pass found is held (pipeline/plan.go, blockedKeys.holds).
//  4. pipeline/plan.go (plan): group sorts the items into ordered keys' chains, batches and
//     single messages; heldHeads asks internal/outboxsql/ordercheck.go (Store.OrderedHeads)
//     which unsent row holds each ordered key of the page; laneUnits (sendablePrefix, laneOf)
//     and batchUnits make the units.
//  5. pipeline/publish.go (publish, runUnit, runLane, send) sends the units,
//     pipeline/tracing.go giving each message its span, through the message.Publisher:
//     relay/rocketmq/publisher.go (Send), whose failures relay/rocketmq/classify.go gives a
//     kind. A unit still sending when the page is done goes on detached (pipeline/late.go,
//     goLate).
//  6. pipeline/park.go (heldRows.addUnscheduled, parkHeld, the rules in parkBook) parks the
//     rows held behind a head due later (Store.Park), and pipeline/incidents.go (judge) turns
//     each failure into a counted retry, a deferral or a dead row.
//  7. pipeline/complete.go (completer, writeBack) writes the results back with the guarded
//     UPDATEs of internal/outboxsql/store.go (Store.MarkSent, MarkRetry, MarkTransientRetry,
//     MarkDeferred, MarkDead).
//  8. With Config.RecordPositions, pipeline/stored.go (markSentRows) hands the positions of
//     the rows just marked sent to pipeline/journal.go (appender), which appends them to
//     the table's stored-position journal (internal/storedlog) in batches, after and apart
//     from the write-back: a full queue or refused appends drop positions (counted), never
//     a row's delivery.
//
// Where each guarantee is enforced (one place each):
//   - Per-key order (a key's rows in id order, one in flight): pipeline/plan.go. It lets an ordered
//     key's rows go only as the prefix of its unsent rows present in the page (sendablePrefix), the nearest
//     older row of the key deciding (a row of an unordered route is no part of the stream;
//     a late row, committed after a higher id of its key was sent, holds nothing behind it;
//     internal/outboxsql/ordercheck.go reads the key's rows that decide it, alike on every index layout), as
//     one chain that pipeline/publish.go (runLane) sends one message after the other, stopping at
//     the first that is not sent. The chains of the keys of one queue go
//     together as one lane (pipeline/plan.go laneOf), in batch requests of one row per key, a key
//     whose row is not sent holding its later rows while the other keys go on. A lane still
//     sending when the rest of its page is done goes on detached (pipeline/publish.go, pipeline/late.go
//     goLate): its rows are skipped by later passes until written back (and by a pass that
//     read them before the write-back: heldByLateUnit), and pipeline/plan.go sees
//     them unsent, so the key's later rows wait while other keys go on. Rows held behind a
//     head due more than a second later are parked until it is due (pipeline/park.go, parkHeld, parkBook): the
//     scan skips them instead of reading them pass after pass. Parked rows name their head
//     (internal/outboxsql/park.go), and follow it whatever happens to it: sent, dead, deleted, brought due or
//     put off, under this leader or the next (ReviewParked).
//   - An acknowledged send is never forgotten: pipeline/complete.go writes sent rows back even after
//     the lock's validity ran out or the pass was cancelled (a detached unit's too), and
//     leader.go lets the sends in flight, detached ones included, finish when the lock is lost.
//   - No two owners of a table or partition at once with sends in flight: leader.go extends
//     the lock (internal/lease/lease.go) past the end of a term that ends by shutdown or
//     handover (group.go), until the last send in flight is written back, and releases it
//     only then.
//   - Failure accounting (what a failed send costs its row): pipeline/incidents.go alone turns the
//     kind of a SendError into a counted retry, a deferral or a dead row (the table of
//     docs/decisions.md, "Failure accounting"). rocketmq/classify.go alone reads the client's
//     errors and send statuses to give that kind; rocketmq/connwatch.go fails a send at once
//     when the connection it waits on is closed, so that the publisher sends it again (a
//     dropped connection costs no attempt and no send timeout).
//   - No status is overwritten by an older one: every UPDATE of internal/outboxsql/store.go is guarded by the
//     row's status and retry count as read.
//   - A database stall is a statement left unanswered (pipeline/progress.go), never a slow broker.
//   - One layout of partitions at a time: internal/lease/layout.go.
//   - What the dashboard shows, read without a query: the per-minute sent/failed/dead counts
//     (metrics/activity.go, fed by internal/recorder with the Prometheus counters), each broker's state and circuit and the
//     name servers' probes (rocketmq/brokerhealth.go), and each relay's open incidents
//     (pipeline/incidentreport.go).
//   - Bounded memory: the bodies held at once (pages read and not yet published, sends of
//     detached units) are bounded by Config.MemoryBudget (pipeline/budget.go), which pipeline/scan.go takes
//     room in before each page; it holds back reading only.
//   - An adopted table's NULLs read one way in every statement (a NULL retry_count is 0 and
//     guarded as 0, a NULL next_retry_time due now, a NULL is_deleted not deleted, a NULL
//     status never sent): schema/nulls.go.
//
// Background work runs as services of one shape (internal/startstop: Start returns once the
// service runs, Stop cancels it and returns once its goroutine has ended). Run (leader.go)
// starts the journal's appender (pipeline/journal.go), the nudge listener and the backlog
// sampler, and stops them before it returns, the appender last, once every write-back is
// done (it then appends what is pending). DrainOnce runs the appender for its pass when
// Run does not. Each
// term (term.go) starts the handover watch, the abort watch and the lock keeper; a term that
// ends by shutdown or handover stops its late units (pipeline/late.go: a startstop.Tasks,
// whose Stop waits for their write-backs and cancels nothing), stops the keeper
// and the check of the database it started (pipeline/dbcheck.go), releases the lock, then
// stops the watches. Group.Run (group.go) starts the nudge listener, the sampler and its
// partitions' relays, and stops them in the reverse order before leaving the group. Each
// pass's completer (pipeline/complete.go) and the publisher's connection watcher
// (rocketmq/connwatch.go) are services too. Nothing the relay started runs once Run returns.
//
// With Config.TracerProvider set, every message sent gets an OpenTelemetry producer span, a
// child of the writer's trace context stored in the row, whose own context the message
// carries on to the consumer (docs/configuration.md, "Tracing").
package relay
