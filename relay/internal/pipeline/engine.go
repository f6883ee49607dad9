// SPDX-License-Identifier: Apache-2.0

// Package pipeline is the relay's delivery engine, one file per stage of a row's path: scan.go
// reads the due rows, prepare.go turns them into messages, plan.go groups them into units,
// publish.go sends them, late.go carries on the units their page did not wait for, park.go
// parks the rows held behind a waiting head, incidents.go judges failures, and complete.go
// writes the results back. drain.go runs one pass through them. Package relay builds an
// Engine from its Config and drives it while it holds the table's lock.
package pipeline

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/relay/internal/recorder"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

type (
	// Message is message.Message.
	Message = message.Message
	// Route is message.Route.
	Route = message.Route
	// Router is message.Router.
	Router = message.Router
	// Publisher is message.Publisher.
	Publisher = message.Publisher
	// KeyBatcher is message.KeyBatcher.
	KeyBatcher = message.KeyBatcher
	// SendError is message.SendError.
	SendError = message.SendError
	// TableMetrics is recorder.Table: the relay's write side of one table's metrics.
	TableMetrics = recorder.Table
)

// UnroutedPolicy says what happens to a message no route matches.
type UnroutedPolicy int

const (
	// UnroutedDefault publishes it with the publisher's default settings.
	UnroutedDefault UnroutedPolicy = iota
	// UnroutedDead marks it dead at once with the reason "no route" (strict routing).
	UnroutedDead
)

// Config is the part of relay.Config the stages read, defaults already applied (relay.New):
// each field is relay.Config's of the same name, Now and PerRowWriteBack its unexported ones.
type Config struct {
	Table                                         string
	Partition, Partitions                         int
	BatchSize, Concurrency                        int
	QueryTimeout, StallTimeout                    time.Duration
	MaxPageBytes, MaxBatchMessages, MaxBatchBytes int
	MaxBodyBytes                                  int
	MemoryBudget                                  *MemoryBudget
	RecordPositions, DisableBatchSend             bool
	Backoff                                       backoff.Policy
	Rand                                          func() float64
	Router                                        Router
	Unrouted                                      UnroutedPolicy
	LockKey                                       string
	// Now is the relay's own clock: only the database's clock is carried forward on it
	// between readings (dbClock).
	Now func() time.Time
	// PerRowWriteBack writes results back with one UPDATE per row instead of the set-based
	// UPDATEs: for the benchmark that measures the set-based write-back against it only.
	PerRowWriteBack bool
}

// Engine runs the passes of one relay over its table's due rows.
type Engine struct {
	cfg       Config
	db        *sql.DB
	pub       Publisher
	batcher   KeyBatcher // pub, when it can batch the keys of a queue; else nil
	store     outboxsql.Store
	log       zerolog.Logger
	incidents *incidents
	progress  Progress
	clock     dbClock         // the database's clock (dbcheck.go)
	check     *startstop.Func // CheckDatabaseAsync's check of the database (dbcheck.go)
	lastCheck atomic.Int64    // when the last began, nanoseconds after progress.start
	// journal appends the sent rows' positions (Config.RecordPositions; else nil);
	// journalSvc is its service (a no-op without it).
	journal    *appender
	journalSvc startstop.Service

	metrics *TableMetrics // nil without metrics
	tracer  trace.Tracer  // nil without a tracer provider

	// slots holds one token per send in flight (Concurrency), pages' and late units' alike.
	slots chan struct{}
	// inflight holds the ids of the rows of late units (publish detached them from their
	// page): later passes leave them alone until their results are written back.
	inflightMu sync.Mutex
	inflight   map[int64]struct{}
	// settled holds the ids of late units' rows written back, with the pass that was
	// running then (passSeq): a page that pass (or an earlier one still draining) read
	// before the write-back holds them unsent, and must not send them again. Pruned as
	// passes begin; guarded by inflightMu.
	settled map[int64]uint64
	passSeq atomic.Uint64
	// late runs the late units (late.go); lateDone wakes the leader when one has ended.
	late     startstop.Tasks
	lateDone chan struct{}
	// parks is what the engine knows of the keys whose held rows it parked (park.go).
	parks parkBook
}

// New returns the engine of one relay: cfg with defaults applied, db its database, log its
// logger, tm its metrics (nil for none), tracer its tracer (nil for none).
func New(cfg Config, db *sql.DB, pub Publisher, log zerolog.Logger, tm *TableMetrics, tracer trace.Tracer) *Engine {
	e := &Engine{
		cfg: cfg, db: db, pub: pub, log: log, metrics: tm, tracer: tracer,
		store: outboxsql.Store{DB: db, Table: schema.QuoteIdent(cfg.Table), Name: cfg.Table, Timeout: cfg.QueryTimeout,
			Partition: cfg.Partition, Partitions: cfg.Partitions},
		incidents: newIncidents(log, tm, cfg.Now),
		slots:     make(chan struct{}, cfg.Concurrency),
		inflight:  map[int64]struct{}{},
		settled:   map[int64]uint64{},
		lateDone:  make(chan struct{}, 1),
	}
	e.batcher, _ = pub.(KeyBatcher)
	e.check = startstop.New(e.CheckDatabase)
	if cfg.RecordPositions {
		if j, err := storedlog.Open(db, cfg.Table); err == nil { // the table's name is checked already
			e.journal = newAppender(j, log, tm, cfg.QueryTimeout)
		}
	}
	e.journalSvc = startstop.New(func(context.Context) {})
	if e.journal != nil {
		e.journalSvc = e.journal.svc
	}
	e.progress.mark()
	e.store.Tracker = &e.progress
	return e
}

// Progress is the engine's stall clock (progress.go).
func (r *Engine) Progress() *Progress { return &r.progress }

// Store is the engine's table statements.
func (r *Engine) Store() *outboxsql.Store { return &r.store }

// LateUnits is the service of the late units running (goLate): its Stop cancels none, it
// returns once they have ended and their results are written back.
func (r *Engine) LateUnits() startstop.Service { return &r.late }

// LateDone is signalled each time a late unit has ended: the rows behind it may go.
func (r *Engine) LateDone() <-chan struct{} { return r.lateDone }

// NewTerm forgets what the engine knew of the keys parked under an earlier term: the next
// pass looks for them again.
func (r *Engine) NewTerm() { r.parks.newTerm() }

// FailingBrokers are the brokers in an incident and since when.
func (r *Engine) FailingBrokers() map[string]time.Time { return r.incidents.failingBrokers() }

// MisconfiguredTopics are the topics refused for the relay's configuration, with the last refusal.
func (r *Engine) MisconfiguredTopics() map[string]string { return r.incidents.misconfiguredTopics() }
