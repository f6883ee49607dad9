// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/msgtrace"
	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

// UnroutedPolicy says what happens to a message no route matches.
type UnroutedPolicy int

const (
	// UnroutedDefault publishes it with the publisher's default settings.
	UnroutedDefault UnroutedPolicy = iota
	// UnroutedDead marks it dead at once with the reason "no route" (strict routing).
	UnroutedDead
)

// Config configures a Relay. Zero fields take the defaults named in their comments.
type Config struct {
	// Table is the outbox table. Defaults to "local_message".
	Table string
	// Partitions splits the table into this many partitions by schema.PartitionColumn
	// (relay.partitions), each relayed under its own lock; NewGroup runs them and shares
	// them with the other relays of the table. Defaults to 1: the whole table, one lock.
	Partitions int
	// Partition is the partition this relay serves, 0 to Partitions-1. Set by NewGroup.
	Partition int
	// Database names the database in metrics and logs (server/schema, no credentials).
	// Defaults to empty.
	Database string
	// BatchSize is the number of rows read, published and written back together.
	// Defaults to 500.
	BatchSize int
	// Concurrency bounds the broker sends in flight at once. Defaults to 16.
	Concurrency int
	// PollInterval is the longest wait between scans when there is nothing to do. Defaults
	// to 1s. After a scan that found work the relay looks again at once; after empty scans
	// it waits MinPollInterval, which stays so while polling keeps finding rows (a scan the
	// poll started found work within the last PollInterval) and then doubles up to
	// PollInterval: rows written by plain-SQL writers that cannot nudge are picked up within
	// MinPollInterval under load, while an idle table costs about one query per PollInterval.
	PollInterval time.Duration
	// MinPollInterval is the first wait after a scan that found nothing. Defaults to 10ms
	// (or PollInterval when that is shorter).
	MinPollInterval time.Duration
	// QueryTimeout bounds every statement the relay runs. Defaults to 5s.
	QueryTimeout time.Duration
	// MaxPageBytes bounds the message bodies one page holds in memory: a page ends early
	// when its bodies reach it. Bodies over MaxBodyBytes are recognised by their length and
	// never loaded. Defaults to 8 MiB.
	MaxPageBytes int
	// MemoryBudget, shared by the relays of a process, bounds the bodies they hold at once
	// (read and not yet published, or in sends still running): the scan reads further rows
	// only while it has room. Defaults to nil: only MaxPageBytes bounds a page.
	MemoryBudget *MemoryBudget
	// RecordPositions records, in the write-back that marks a row sent, where the broker
	// stored its message (the table's audit columns, when it has them): what the broker
	// audit checks. Off by default: filling the columns makes each sent row longer, so the
	// write-back no longer updates it in place (docs/performance.md, "The broker audit").
	RecordPositions bool
	// DisableBatchSend sends every message in a request of its own. By default messages of
	// one topic without delay level go in batch requests of up to MaxBatchMessages messages
	// and MaxBatchBytes bytes: those without sharding key together, those with one together
	// with the keys of their queue when the publisher is a KeyBatcher (on an ordered route,
	// each key's rows in id order).
	DisableBatchSend bool
	// MaxBatchMessages bounds the messages in one batch request. Defaults to 128.
	MaxBatchMessages int
	// MaxBatchBytes bounds the bodies in one batch request. Defaults to 1 MiB, well under the
	// broker's 4 MiB request limit.
	MaxBatchBytes int
	// MaxBodyBytes marks longer bodies dead at once. Defaults to 4 MiB, the broker's default.
	MaxBodyBytes int
	// Backoff is the retry schedule; Delay(retry_count) after a failure. Defaults to
	// backoff.Default(): 1s doubling up to 1h.
	Backoff backoff.Policy
	// Rand is the jitter source, uniform in [0, 1). Defaults to math/rand/v2.
	Rand func() float64
	// Router chooses each message's route. Defaults to DefaultRouter.
	Router Router
	// Unrouted applies when Router has no route. Defaults to UnroutedDefault.
	Unrouted UnroutedPolicy
	// LockKey is the Redis key of the table's leader lock. Defaults to
	// "outbox-relay:lock:" + Database + ":" + Table when Database is set, else
	// "outbox-relay:lock:" + Table.
	LockKey string
	// LockClients, when not empty, are independent Redis masters holding the lock as a
	// Redlock quorum (a majority must agree); nudges still come through the client given to
	// New. Defaults to none: the lock lives on that client.
	LockClients []redis.UniversalClient
	// LockTTL is the lock's expiry. The leader extends it every quarter of it and a standby
	// tries to take it as often, so a standby takes over within about one TTL of a leader's
	// death. A leader that has not heard from the database for StallTimeout gives the lock
	// up. Defaults to 2s.
	LockTTL time.Duration
	// StallTimeout is how long a leader may go without any answer from the database before
	// it releases the lock for a standby whose path may be healthy. Defaults to 3 × LockTTL
	// or 2 × QueryTimeout, whichever is longer.
	StallTimeout time.Duration
	// ShutdownTimeout bounds the wait for the in-flight batch when Run's context ends;
	// sends still running then are abandoned (their rows stay due). Defaults to 15s.
	ShutdownTimeout time.Duration
	// DisableNudge stops listening for writers' nudges; the relay then relies on polling.
	DisableNudge bool
	// Logger receives one line per batch at info and one per message at debug.
	// Defaults to a disabled logger.
	Logger *zerolog.Logger
	// Metrics records the relay's metrics. Defaults to none.
	Metrics *Metrics
	// TracerProvider, when set, records an OpenTelemetry producer span per message sent,
	// a child of the writer's trace context from the row's properties, and publishes the
	// span's context as the message's traceparent (see tracing.go). Defaults to nil: no
	// spans, no cost.
	TracerProvider trace.TracerProvider

	// layoutKey is the Redis key that fences the table's layout of partitions: set by
	// NewGroup for its partitions, else LockKey + ":layout".
	layoutKey string

	// now is the relay's own clock, time.Now unless a test sets it: only the database's
	// clock is carried forward on it between readings (dbClock).
	now func() time.Time

	// perRowWriteBack writes results back with one UPDATE per row, as seed 002's relay did,
	// instead of the set-based UPDATEs. For the benchmark only (relay/bench_test.go measures
	// the set-based write-back against it); nothing else sets it.
	perRowWriteBack bool
}

func (c *Config) setDefaults() {
	if c.Table == "" {
		c.Table = "local_message"
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.MinPollInterval == 0 {
		c.MinPollInterval = min(10*time.Millisecond, c.PollInterval)
	}
	if c.QueryTimeout == 0 {
		c.QueryTimeout = 5 * time.Second
	}
	if c.MaxPageBytes == 0 {
		c.MaxPageBytes = 8 << 20
	}
	if c.MaxBatchMessages == 0 {
		c.MaxBatchMessages = 128
	}
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = 1 << 20
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = outbox.DefaultMaxBodyBytes
	}
	c.Backoff = c.Backoff.WithDefaults()
	if c.Router == nil {
		c.Router = DefaultRouter
	}
	if c.LockKey == "" {
		c.LockKey = "outbox-relay:lock:" + c.Table
		if c.Database != "" {
			c.LockKey = "outbox-relay:lock:" + c.Database + ":" + c.Table
		}
	}
	if c.LockTTL == 0 {
		c.LockTTL = 2 * time.Second
	}
	if c.layoutKey == "" {
		c.layoutKey = c.LockKey + ":layout"
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = max(3*c.LockTTL, 2*c.QueryTimeout)
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
}

func (c *Config) validate() error {
	if err := schema.ValidateIdent(c.Table); err != nil {
		return fmt.Errorf("relay: Table: %w", err)
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("relay: BatchSize: must be between 1 and 10000, got %d", c.BatchSize)
	case c.Concurrency < 1:
		return fmt.Errorf("relay: Concurrency: must be at least 1, got %d", c.Concurrency)
	case c.PollInterval < 0:
		return fmt.Errorf("relay: PollInterval: must be positive, got %s", c.PollInterval)
	case c.MinPollInterval < 0 || c.MinPollInterval > c.PollInterval:
		return fmt.Errorf("relay: MinPollInterval: must be between 0 and PollInterval (%s), got %s", c.PollInterval, c.MinPollInterval)
	case c.QueryTimeout < 0 || c.StallTimeout < 0:
		return fmt.Errorf("relay: QueryTimeout and StallTimeout must be positive")
	case c.MaxPageBytes < 1:
		return fmt.Errorf("relay: MaxPageBytes: must be positive, got %d", c.MaxPageBytes)
	case c.MaxBatchMessages < 1:
		return fmt.Errorf("relay: MaxBatchMessages: must be at least 1, got %d", c.MaxBatchMessages)
	case c.MaxBatchBytes < 1 || c.MaxBodyBytes < 1:
		return fmt.Errorf("relay: MaxBatchBytes and MaxBodyBytes must be positive")
	case c.LockTTL < 30*time.Millisecond:
		return fmt.Errorf("relay: LockTTL: must be at least 30ms, got %s", c.LockTTL)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("relay: ShutdownTimeout: must be positive, got %s", c.ShutdownTimeout)
	case c.Partitions < 1 || c.Partitions > schema.MaxPartitions:
		return fmt.Errorf("relay: Partitions: must be between 1 and %d, got %d", schema.MaxPartitions, c.Partitions)
	case c.Partition < 0 || c.Partition >= c.Partitions:
		return fmt.Errorf("relay: Partition: must be between 0 and Partitions-1 (%d), got %d", c.Partitions-1, c.Partition)
	case c.Unrouted != UnroutedDefault && c.Unrouted != UnroutedDead:
		return fmt.Errorf("relay: Unrouted: unknown policy %d", c.Unrouted)
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("relay: Backoff: %w", err)
	}
	return nil
}

// Relay delivers the rows of one outbox table. Run it with Run; DrainOnce is the single pass
// Run repeats, for tools and tests that already hold the lock or need none.
type Relay struct {
	cfg       Config
	db        *sql.DB
	rdb       redis.UniversalClient
	pub       Publisher
	batcher   KeyBatcher // pub, when it can batch the keys of a queue; else nil
	store     outboxsql.Store
	log       zerolog.Logger
	incidents *incidents
	progress  progress
	clock     dbClock      // the database's clock (dbcheck.go)
	checking  atomic.Bool  // a checkDatabaseAsync runs
	lastCheck atomic.Int64 // when the last began, nanoseconds after progress.start

	leading      atomic.Bool
	lease        *lease.Lease // nil without a Redis client
	waitingSince atomic.Int64 // when a standby began to wait, nanoseconds after progress.start; 0 when not waiting

	metrics *TableMetrics // nil without cfg.Metrics
	tracer  trace.Tracer  // nil without cfg.TracerProvider

	// Set by a Group for each of its partitions: gate says whether this process should
	// hold the partition, and nudgeIn carries the nudges of the group's one subscription.
	gate    *gate
	nudgeIn chan struct{}
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
	// late counts the late units running; lateDone wakes the leader when one has ended.
	late     sync.WaitGroup
	lateDone chan struct{}
	// parked remembers, per ordered key whose held rows were parked (parkHeld), the head
	// they wait for; parkedFound says whether those parked before this term were found
	// (reviewParked), parkReviewed when the heads were last looked at. Used by the pass's
	// goroutine only. parkReview asks for a look at once (a broker's recovery moved heads).
	parked       map[outboxsql.OrderKey]outboxsql.HeldHead
	parkedFound  bool
	parkReviewed time.Time
	parkReview   atomic.Bool
	// sawWork, set by a Group, wakes the other partitions this process holds after a pass
	// that found rows: writers write to every partition, so where one partition's polling
	// found work the others' likely will, and their adaptive polls need not wait it out.
	sawWork func()
}

// New checks cfg and returns a relay of cfg.Table. rdb holds the lock and carries nudges;
// it may be nil only for DrainOnce.
func New(db *sql.DB, rdb redis.UniversalClient, pub Publisher, cfg Config) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if db == nil || pub == nil {
		return nil, errors.New("relay: New needs a database and a publisher")
	}
	log := cfg.Logger.With().Str("table", cfg.Table).Logger()
	if cfg.Database != "" {
		log = log.With().Str("database", cfg.Database).Logger()
	}
	if cfg.Partitions > 1 {
		log = log.With().Int("partition", cfg.Partition).Int("partitions", cfg.Partitions).Logger()
	}
	r := &Relay{
		cfg: cfg, db: db, rdb: rdb, pub: pub, metrics: cfg.Metrics.Table(cfg.Database, cfg.Table),
		store: outboxsql.Store{DB: db, Table: schema.QuoteIdent(cfg.Table), Name: cfg.Table, Timeout: cfg.QueryTimeout,
			Partition: cfg.Partition, Partitions: cfg.Partitions},
		log:       log,
		incidents: newIncidents(log, cfg.Metrics.Table(cfg.Database, cfg.Table), cfg.now),
		tracer:    msgtrace.Tracer(cfg.TracerProvider),
		slots:     make(chan struct{}, cfg.Concurrency),
		inflight:  map[int64]struct{}{},
		settled:   map[int64]uint64{},
		lateDone:  make(chan struct{}, 1),
	}
	r.batcher, _ = pub.(KeyBatcher)
	if rdb != nil {
		r.lease = lease.New(lease.Config{Client: rdb, Clients: cfg.LockClients, Key: cfg.LockKey,
			LayoutKey: cfg.layoutKey, Partitions: cfg.Partitions, TTL: cfg.LockTTL})
	}
	r.progress.mark()
	r.store.Tracker = &r.progress
	return r, nil
}

// Table returns the table the relay serves.
func (r *Relay) Table() string { return r.cfg.Table }

// LockKey returns the Redis key of the lock this relay holds or waits for.
func (r *Relay) LockKey() string { return r.cfg.LockKey }

// Name is the table, followed by "[p/P]" for partition p of P.
func (r *Relay) Name() string {
	if r.cfg.Partitions <= 1 {
		return r.cfg.Table
	}
	return fmt.Sprintf("%s[%d/%d]", r.cfg.Table, r.cfg.Partition, r.cfg.Partitions)
}

// Stats counts what one DrainOnce did.
type Stats struct {
	// Read is the number of due rows read.
	Read int
	// Sent, Retried and Dead count the rows whose status this relay changed.
	Sent, Retried, Dead int
	// Deferred counts rows whose attempt failed in a broker incident: they wait out the
	// broker's backoff with their retry count untouched.
	Deferred int
	// Held is the number of due rows left for later: held back behind an earlier message of
	// their ordered key, still being sent by an earlier pass's slow send, or abandoned when
	// the context ended.
	Held int
}

// Changed is the number of rows whose status changed.
func (s Stats) Changed() int { return s.Sent + s.Retried + s.Dead }

func (s *Stats) add(o Stats) {
	s.Read += o.Read
	s.Sent += o.Sent
	s.Retried += o.Retried
	s.Dead += o.Dead
	s.Deferred += o.Deferred
	s.Held += o.Held
}

// DrainOnce makes one pass over the rows due now, failed ones first. The stages overlap:
// the next page is read while the current one is published, and results are written back
// while later pages are published; the pass returns when every result is written back.
// When ctx is done it takes no new page and abandons the sends in flight (their rows stay
// due, to be sent again by a later pass); results already acknowledged are always written
// back. There is no separate stop that lets sends in flight finish: Run owns that
// graceful sequence (docs/decisions.md, "DrainOnce takes one context").
func (r *Relay) DrainOnce(ctx context.Context) (Stats, error) {
	return r.drain(ctx, ctx, nil, false)
}

// drain is DrainOnce with a fence: when fence is set and returns false (the lock's validity
// has run out), nothing more is published. With detach, a page does not wait for its slow
// units (publish): they go on after the pass, and the leader waits for them (waitLate) before
// its term ends.
func (r *Relay) drain(stop, ctx context.Context, fence func() bool, detach bool) (Stats, error) {
	r.reviewParked(stop)
	nowMs, err := r.dbNow(ctx)
	if err != nil {
		return Stats{}, err
	}
	pass := r.beginPass()
	scanCtx, cancelScan := context.WithCancel(ctx)
	defer cancelScan()
	pages := make(chan *page, 1)
	var scanErr error
	go func() {
		defer close(pages)
		scanErr = r.scan(stop, scanCtx, nowMs, pages)
	}()
	comp := r.newCompleter(ctx, fence)
	go comp.run()
	blocked := blockedKeys{}
	defer context.AfterFunc(stop, comp.wake)()

	for pg := range pages {
		if !comp.waitHealthy(stop, ctx) || stop.Err() != nil || ctx.Err() != nil || (fence != nil && !fence()) {
			cancelScan()
			r.cfg.MemoryBudget.release(pg.bytes)
			continue // drain the channel; these rows stay due
		}
		results := r.processPage(ctx, pg, pass, fence, blocked, detach)
		comp.submit(pg.rows, results)
	}
	st, err := comp.close()
	if scanErr != nil && ctx.Err() == nil && stop.Err() == nil && !errors.Is(scanErr, context.Canceled) {
		err = errors.Join(scanErr, err)
	}
	return st, err
}

// processPage plans and publishes one page and returns each row's result. blocked carries,
// from one page of a pass to the next, the ordered keys found held behind an unsent row
// (plan).
func (r *Relay) processPage(ctx context.Context, pg *page, pass uint64, fence func() bool, blocked blockedKeys, detach bool) []result {
	start := time.Now()
	rows := pg.rows
	results := make([]result, len(rows))
	items := make([]item, len(rows))
	routes := map[routeKey]routed{}
	var hold heldRows
	var inPage map[int64]bool // the page's ids, needed only when keys are blocked
	if len(blocked) > 0 {
		inPage = make(map[int64]bool, len(rows))
		for i := range rows {
			inPage[rows[i].ID] = true
		}
	}
	r.inflightMu.Lock()
	anyInflight := len(r.inflight) > 0 || len(r.settled) > 0
	r.inflightMu.Unlock()
	for i := range rows {
		if anyInflight && r.heldByLateUnit(rows[i].ID, pass) {
			// A late unit of an earlier page publishes it, or published it after this page
			// was read: results[i] stays zero, which the completer leaves alone.
			continue
		}
		msg, route, err := r.prepare(&rows[i], routes)
		if err != nil {
			results[i] = result{kind: dead, reason: err.Error()}
			continue
		}
		if route.Ordered && msg.ShardingKey != "" {
			k := outboxsql.OrderKey{Topic: msg.Topic, Key: msg.ShardingKey}
			if h, ok := blocked[k]; ok && rows[i].ID > h.ID && !inPage[h.ID] {
				// Held behind an unsent row of its key that an earlier page of this pass
				// found and that is not in this page: no need to ask the database again.
				hold.add(k, h, rows[i].ID)
				continue
			}
		}
		if wait, last, held := r.incidents.holdMisconfigured(msg.Topic, start); held {
			// The broker refuses the topic for the relay's configuration: one row probes it
			// per backoff, the others wait unsent (their retry count untouched).
			results[i] = result{kind: deferred, delay: wait, reason: last + misconfiguredMark, unsent: true}
			continue
		}
		items[i] = item{row: &rows[i], msg: msg, route: route}
	}
	units, err := r.plan(ctx, items, blocked)
	if err != nil {
		// The ordered-key check could not run: hold the page's ordered rows, send the rest.
		r.log.Warn().Err(err).Msg("ordered-key check failed; ordered rows of this page wait for the next pass")
		units = r.unorderedUnits(items)
	}
	if len(blocked) > 0 {
		scheduled := map[int]bool{}
		for _, u := range units {
			for _, i := range u.idx {
				scheduled[i] = true
			}
		}
		for i, it := range items {
			if it.msg == nil || !it.route.Ordered || it.msg.ShardingKey == "" || scheduled[i] {
				continue
			}
			k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
			if h, ok := blocked[k]; ok && it.row.ID > h.ID {
				hold.add(k, h, it.row.ID)
			}
		}
	}
	late := r.publish(ctx, units, items, results, fence, detach)
	for _, ru := range late {
		pg.bytes -= r.goLate(ctx, ru, items, fence) // the late unit holds its bodies' bytes now
	}
	r.parkHeld(ctx, hold, items, results)
	r.judge(ctx, items, results)
	for i := range rows {
		rows[i].Content = nil // published: the completer needs ids and counts only
	}
	r.cfg.MemoryBudget.release(pg.bytes)
	pg.bytes = 0
	r.metrics.ObserveBatch(time.Since(start))
	return results
}

// judge turns failed sends into retries or deferrals (incidents.judge) and, when a broker
// recovered from an incident, brings the rows deferred during it forward.
func (r *Relay) judge(ctx context.Context, items []item, results []result) {
	if r.incidents.judge(items, results) {
		// The rows deferred during the incident hold deferrals of up to 30 s, grown while
		// the broker failed: bring them forward, so that an outage's rows follow the broker's
		// return within a pass instead of waiting them out.
		nowMs, err := r.dbNow(ctx)
		var n int64
		if err == nil {
			n, err = r.store.HastenDeferred(ctx, nowMs, deferredMark)
		}
		if err != nil {
			r.log.Warn().Err(err).Msg("broker recovered; rows deferred during its incident wait out their deferral")
		} else if n > 0 {
			r.log.Info().Int64("rows", n).Msg("broker recovered: rows deferred during its incident are due now")
			r.parkReview.Store(true) // the rows parked behind them follow
		}
	}
}

// heldByLateUnit reports whether a late unit holds the row id, or wrote it back while pass
// (the pass of the page that read it) or a later one ran: the page's copy of the row is then
// older than the write-back.
func (r *Relay) heldByLateUnit(id int64, pass uint64) bool {
	r.inflightMu.Lock()
	defer r.inflightMu.Unlock()
	if _, ok := r.inflight[id]; ok {
		return true
	}
	at, ok := r.settled[id]
	return ok && at >= pass
}

// beginPass numbers a new pass and forgets the late units' rows written back before the
// previous pass began: every page read from now on was read after their write-back.
func (r *Relay) beginPass() uint64 {
	pass := r.passSeq.Add(1)
	r.inflightMu.Lock()
	for id, at := range r.settled {
		if at+1 < pass {
			delete(r.settled, id)
		}
	}
	r.inflightMu.Unlock()
	return pass
}

// goLate takes over a unit its page did not wait for (publish): its rows are held (later
// passes skip them) until it ends and its results are judged and written back on their own,
// acknowledged sends whatever the lock, like any page's. Then the leader is woken: the rows
// behind them (the rest of an ordered key) may go. It returns the bodies' bytes the unit
// now holds of the MemoryBudget, which it releases when its sends have ended.
func (r *Relay) goLate(ctx context.Context, ru *running, items []item, fence func() bool) (bodies int64) {
	lateItems := make([]item, len(ru.u.idx))
	rows := make([]outboxsql.Row, len(ru.u.idx))
	r.inflightMu.Lock()
	for n, i := range ru.u.idx {
		bodies += int64(len(items[i].row.Content))
		rows[n] = *items[i].row
		rows[n].Content = nil // the message holds the body
		lateItems[n] = item{row: &rows[n], msg: items[i].msg, route: items[i].route}
		r.inflight[rows[n].ID] = struct{}{}
	}
	r.inflightMu.Unlock()
	r.late.Add(1)
	go func() {
		defer r.late.Done()
		<-ru.done
		r.cfg.MemoryBudget.release(bodies) // sent or failed: the client holds the bodies no more
		r.judge(ctx, lateItems, ru.out)
		comp := r.newCompleter(ctx, fence)
		go comp.run()
		comp.submit(rows, ru.out)
		if _, err := comp.close(); err != nil {
			r.log.Warn().Err(err).Int("rows", len(rows)).Msg("write-back of a late unit failed; its rows stay due")
		}
		r.inflightMu.Lock()
		at := r.passSeq.Load()
		for n := range rows {
			delete(r.inflight, rows[n].ID)
			r.settled[rows[n].ID] = at
		}
		r.inflightMu.Unlock()
		select {
		case r.lateDone <- struct{}{}:
		default:
		}
	}()
	return bodies
}

// parkAfter is how far in the future a held key's head must be due for the key's held rows
// to be parked: a head due sooner is read again with them, a pass or two, which costs less
// than their park and the write that makes them due. Whatever then moves the head (a broker's
// recovery bringing deferred rows forward, an operator), reviewParked moves its rows along.
const parkAfter = time.Second

// maxParkedKeys bounds the parked keys remembered for an early unpark.
const maxParkedKeys = 100000

// heldRows are the rows of a page held behind the unsent head of their ordered key.
type heldRows map[outboxsql.OrderKey]*heldKey

type heldKey struct {
	head outboxsql.HeldHead
	ids  []int64
}

func (h *heldRows) add(k outboxsql.OrderKey, head outboxsql.HeldHead, id int64) {
	if *h == nil {
		*h = heldRows{}
	}
	hk := (*h)[k]
	if hk == nil {
		hk = &heldKey{head: head}
		(*h)[k] = hk
	}
	hk.ids = append(hk.ids, id)
}

// parkHeld keeps a key known blocked from being read again pass after pass. The rows of
// hold wait behind a head due more than parkAfter from now: they are made due when their
// head is (store.park), so that the scan skips them until then and a pass costs the same
// whatever the backlog held behind a waiting head. A parked key whose head was sent or went
// dead before its time (an operator brought it forward) is made due again now
// (store.unpark); reviewParked does the same for a head deleted or moved.
func (r *Relay) parkHeld(ctx context.Context, hold heldRows, items []item, results []result) {
	nowMs, err := r.dbNow(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("held rows not parked: they are read again by the next pass")
		return
	}
	for i, it := range items {
		if it.msg == nil || len(r.parked) == 0 || (results[i].kind != sent && results[i].kind != dead) {
			continue
		}
		k := outboxsql.OrderKey{Topic: it.msg.Topic, Key: it.msg.ShardingKey}
		if h, ok := r.parked[k]; ok && h.ID == it.row.ID {
			delete(r.parked, k)
			if n, err := r.store.Unpark(ctx, k, h.ID, h.DueMs, nowMs); err != nil {
				r.log.Warn().Err(err).Str("sharding_key", k.Key).Msg("head of a parked key sent; its rows wait until the head's old due time")
			} else if n > 0 {
				r.log.Debug().Str("sharding_key", k.Key).Int64("rows", n).Msg("head of a parked key sent: its rows are due now")
			}
		}
	}
	for k, hk := range hold {
		if hk.head.DueMs <= nowMs+parkAfter.Milliseconds() {
			continue // due soon: read again, as any held row
		}
		// The ordered check names the nearest unsent row below the page as the head: for rows
		// written after a parked backlog, one of its parked rows, due with the real head.
		// The head remembered (and named in the rows' reason) stays the older one, whose
		// send or move brings the key forward.
		head := hk.head
		if old, known := r.parked[k]; known && old.ID < head.ID && old.DueMs == head.DueMs {
			head = old
		}
		n, err := r.store.Park(ctx, hk.ids, head.DueMs, head.ID)
		if err != nil {
			r.log.Warn().Err(err).Str("sharding_key", k.Key).Msg("held rows not parked; they are read again each pass")
			continue
		}
		if r.parked == nil {
			r.parked = map[outboxsql.OrderKey]outboxsql.HeldHead{}
		}
		if _, known := r.parked[k]; known || len(r.parked) < maxParkedKeys {
			r.parked[k] = head
		}
		r.log.Debug().Str("sharding_key", k.Key).Int64("rows", n).Int64("head", head.ID).
			Time("until", time.UnixMilli(head.DueMs)).Msg("rows held behind a waiting head parked until it is due")
	}
}

// routeKey is a topic and tag, the inputs of validation and routing.
type routeKey struct{ topic, tag string }

// routed is the route of a topic and tag, or why they can never be sent: invalid names, or
// no route under strict routing (checked after the body, as it always was).
type routed struct {
	route            Route
	invalid, noRoute error
}

// routeOf validates topic and tag and finds their route, once per distinct pair of a page:
// a page holds few distinct ones, and validating a topic runs a regular expression and
// routing may match patterns (a third of prepare's CPU in the drain profile).
func (r *Relay) routeOf(topic, tag string, seen map[routeKey]routed) routed {
	k := routeKey{topic, tag}
	if rt, ok := seen[k]; ok {
		return rt
	}
	var rt routed
	if err := outbox.ValidateTopic(topic); err != nil {
		rt.invalid = fmt.Errorf("invalid topic: %w", err)
	} else if err := outbox.ValidateTag(tag); err != nil {
		rt.invalid = fmt.Errorf("invalid tag: %w", err)
	} else if route, ok := r.cfg.Router.Route(topic, tag); ok {
		rt.route = route
	} else if r.cfg.Unrouted == UnroutedDead {
		rt.noRoute = fmt.Errorf("no route for topic %q tag %q (relay.unrouted is dead)", topic, tag)
	}
	seen[k] = rt
	return rt
}

// prepare turns a row into a message and finds its route (remembered in routes); an error is
// permanent: the row can never be sent as it is.
func (r *Relay) prepare(rw *outboxsql.Row, routes map[routeKey]routed) (*Message, Route, error) {
	rt := r.routeOf(rw.Topic, rw.Tag, routes)
	if rt.invalid != nil {
		return nil, Route{}, rt.invalid
	}
	m, err := message.FromRow(message.Row{ID: rw.ID, MsgID: rw.MsgID, Topic: rw.Topic, Tag: rw.Tag, Keys: rw.Keys,
		ShardingKey: rw.ShardingKey, Props: rw.Properties.String, Body: rw.Content, BodyLen: rw.ContentLen}, r.cfg.MaxBodyBytes)
	if err != nil {
		return nil, Route{}, err
	}
	if rt.noRoute != nil {
		return nil, Route{}, rt.noRoute
	}
	m.RetryCount, m.MaxRetries = rw.RetryCount, rw.MaxRetries
	return m, rt.route, nil
}
