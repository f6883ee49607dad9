// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/msgtrace"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/lease"
	"github.com/outbox-relay/outbox-relay/relay/internal/pipeline"
	"github.com/outbox-relay/outbox-relay/relay/internal/recorder"
	"github.com/outbox-relay/outbox-relay/schema"
)

// UnroutedPolicy says what happens to a message no route matches.
type UnroutedPolicy = pipeline.UnroutedPolicy

const (
	// UnroutedDefault publishes it with the publisher's default settings.
	UnroutedDefault = pipeline.UnroutedDefault
	// UnroutedDead marks it dead at once with the reason "no route" (strict routing).
	UnroutedDead = pipeline.UnroutedDead
)

type (
	// MemoryBudget bounds the message bodies that the relays of a process hold at once
	// (pipeline.MemoryBudget); a nil *MemoryBudget bounds nothing.
	MemoryBudget = pipeline.MemoryBudget
	// Stats counts what one DrainOnce did (pipeline.Stats).
	Stats = pipeline.Stats
)

// NewMemoryBudget returns a budget of limit bytes of message bodies, shared by the relays
// given it as Config.MemoryBudget.
func NewMemoryBudget(limit int64) *MemoryBudget { return pipeline.NewMemoryBudget(limit) }

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
	// RecordPositions records where the broker stored each sent row's message in the
	// table's stored-position journal (schema.StoredLogTable, when the table has it): what
	// the broker audit checks. The positions are appended in batches, after and apart from
	// the write-back that marks the rows sent (docs/decisions.md, "Broker audit: positions
	// in a journal"). Off by default for a library user; the binary sets it from
	// audit.enabled.
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
	// span's context as the message's traceparent (see internal/pipeline/tracing.go). Defaults to nil: no
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

// pipeline is the part of c the engine reads.
func (c *Config) pipeline() pipeline.Config {
	return pipeline.Config{Table: c.Table, Partition: c.Partition, Partitions: c.Partitions,
		BatchSize: c.BatchSize, Concurrency: c.Concurrency, QueryTimeout: c.QueryTimeout, StallTimeout: c.StallTimeout,
		MaxPageBytes: c.MaxPageBytes, MaxBatchMessages: c.MaxBatchMessages, MaxBatchBytes: c.MaxBatchBytes,
		MaxBodyBytes: c.MaxBodyBytes, MemoryBudget: c.MemoryBudget, RecordPositions: c.RecordPositions,
		DisableBatchSend: c.DisableBatchSend, Backoff: c.Backoff, Rand: c.Rand, Router: c.Router,
		Unrouted: c.Unrouted, LockKey: c.LockKey, Now: c.now, PerRowWriteBack: c.perRowWriteBack}
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
	cfg Config
	rdb redis.UniversalClient
	eng *pipeline.Engine
	log zerolog.Logger

	leading      atomic.Bool
	lease        *lease.Lease // nil without a Redis client
	waitingSince atomic.Int64 // when a standby began to wait, nanoseconds after the stall clock's start; 0 when not waiting

	metrics *recorder.Table // nil without cfg.Metrics

	// Set by a Group for each of its partitions: gate says whether this process should
	// hold the partition, and nudgeIn carries the nudges of the group's one subscription.
	gate    *gate
	nudgeIn chan struct{}
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
	r := &Relay{cfg: cfg, rdb: rdb, log: log, metrics: recorder.For(cfg.Metrics, cfg.Database, cfg.Table)}
	r.eng = pipeline.New(cfg.pipeline(), db, pub, log, r.metrics, msgtrace.Tracer(cfg.TracerProvider))
	if rdb != nil {
		r.lease = lease.New(lease.Config{Client: rdb, Clients: cfg.LockClients, Key: cfg.LockKey,
			LayoutKey: cfg.layoutKey, Partitions: cfg.Partitions, TTL: cfg.LockTTL})
	}
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

// DrainOnce makes one pass over the rows due now, failed ones first. The stages overlap:
// the next page is read while the current one is published, and results are written back
// while later pages are published; the pass returns when every result is written back.
// When ctx is done it takes no new page and abandons the sends in flight (their rows stay
// due, to be sent again by a later pass); results already acknowledged are always written
// back. There is no separate stop that lets sends in flight finish: Run owns that
// graceful sequence (docs/decisions.md, "DrainOnce takes one context").
//
// With Config.RecordPositions, the positions of the rows it marked sent are in the table's
// stored-position journal when it returns (unless Run is appending them meanwhile).
func (r *Relay) DrainOnce(ctx context.Context) (Stats, error) {
	if ap := r.eng.JournalAppender(); isStopped(ap) {
		_ = ap.Start(context.WithoutCancel(ctx)) // a Func never fails to start
		defer ap.Stop()
	}
	return r.eng.Drain(ctx, ctx, nil, false)
}

// isStopped reports whether s does not run.
func isStopped(s startstop.Service) bool {
	select {
	case <-s.Stopped():
		return true
	default:
		return false
	}
}
