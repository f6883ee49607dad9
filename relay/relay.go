package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/outbox"
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
	// BatchSize is the number of rows read, published and written back together.
	// Defaults to 500.
	BatchSize int
	// Concurrency bounds the broker sends in flight at once. Defaults to 16.
	Concurrency int
	// PollInterval is the wait between scans when there is nothing to do. Defaults to 1s.
	PollInterval time.Duration
	// DisableBatchSend sends every message in a request of its own. By default messages of
	// one topic on an unordered route without delay level or sharding key go in batch
	// requests of up to MaxBatchMessages messages and MaxBatchBytes bytes.
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
	// "outbox-relay:lock:" + Table.
	LockKey string
	// LockTTL is the lock's expiry; it is extended every third of it, and a standby takes
	// over about one TTL after a leader dies. Defaults to 10s.
	LockTTL time.Duration
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
	}
	if c.LockTTL == 0 {
		c.LockTTL = 10 * time.Second
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 15 * time.Second
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
	case c.MaxBatchMessages < 1:
		return fmt.Errorf("relay: MaxBatchMessages: must be at least 1, got %d", c.MaxBatchMessages)
	case c.MaxBatchBytes < 1 || c.MaxBodyBytes < 1:
		return fmt.Errorf("relay: MaxBatchBytes and MaxBodyBytes must be positive")
	case c.LockTTL < 30*time.Millisecond:
		return fmt.Errorf("relay: LockTTL: must be at least 30ms, got %s", c.LockTTL)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("relay: ShutdownTimeout: must be positive, got %s", c.ShutdownTimeout)
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
	cfg   Config
	db    *sql.DB
	rdb   redis.UniversalClient
	pub   Publisher
	store store
	log   zerolog.Logger
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
	return &Relay{
		cfg: cfg, db: db, rdb: rdb, pub: pub,
		store: store{db: db, table: cfg.Table},
		log:   cfg.Logger.With().Str("table", cfg.Table).Logger(),
	}, nil
}

// Stats counts what one DrainOnce did.
type Stats struct {
	// Read is the number of due rows read.
	Read int
	// Sent, Retried and Dead count the rows whose status this relay changed.
	Sent, Retried, Dead int
	// Held is the number of due rows left for later: held back behind an earlier message of
	// their ordered key, or abandoned when the context ended.
	Held int
}

// Changed is the number of rows whose status changed.
func (s Stats) Changed() int { return s.Sent + s.Retried + s.Dead }

func (s *Stats) add(o Stats) {
	s.Read += o.Read
	s.Sent += o.Sent
	s.Retried += o.Retried
	s.Dead += o.Dead
	s.Held += o.Held
}

// DrainOnce makes one pass over the rows due now, failed ones first, batch by batch. It
// stops taking new batches when stop is done, and abandons sends in flight when ctx is done
// (their rows stay due). Results already acknowledged are always written back.
func (r *Relay) DrainOnce(stop, ctx context.Context) (Stats, error) {
	var total Stats
	nowMs := time.Now().UnixMilli()
	buf := make([]row, 0, r.cfg.BatchSize)
	for _, status := range []int{int(outbox.StatusFailed), int(outbox.StatusPending)} {
		c := cursor{next: -1 << 62}
		for {
			if stop.Err() != nil || ctx.Err() != nil {
				return total, nil
			}
			var err error
			buf, err = r.store.page(ctx, status, nowMs, c, r.cfg.BatchSize, buf[:0])
			if err != nil {
				if ctx.Err() != nil {
					return total, nil
				}
				return total, err
			}
			if len(buf) == 0 {
				break
			}
			last := buf[len(buf)-1]
			c = cursor{next: last.nextRetry, id: last.id}
			st, err := r.processBatch(ctx, buf)
			total.add(st)
			if err != nil {
				return total, err
			}
			if len(buf) < r.cfg.BatchSize {
				break
			}
		}
	}
	return total, nil
}

// outcome kinds of one row in a batch.
const (
	held = iota
	sent
	retry
	dead
)

type result struct {
	kind   int
	reason string
	err    error // the publisher's error of a retry
}

// brokerOutage returns an ErrBrokerUnreachable error when the batch sent nothing and every
// failure was a failure to reach the broker.
func brokerOutage(results []result) error {
	var outage error
	for _, res := range results {
		switch {
		case res.kind == sent:
			return nil
		case res.kind == retry && !errors.Is(res.err, ErrBrokerUnreachable):
			return nil
		case res.kind == retry:
			outage = res.err
		}
	}
	if outage == nil {
		return nil
	}
	return fmt.Errorf("%w; rows left due, retry counts untouched", outage)
}

// item is one row of a batch, prepared for publishing.
type item struct {
	row   *row
	msg   *Message
	route Route
}

func (r *Relay) processBatch(ctx context.Context, rows []row) (Stats, error) {
	start := time.Now()
	results := make([]result, len(rows))
	items := make([]item, len(rows))
	var orderedKeys []string
	seenKey := map[string]bool{}
	var maxOrderedID int64
	for i := range rows {
		msg, route, err := r.prepare(&rows[i])
		if err != nil {
			results[i] = result{kind: dead, reason: err.Error()}
			continue
		}
		items[i] = item{row: &rows[i], msg: msg, route: route}
		if route.Ordered && msg.ShardingKey != "" {
			if !seenKey[msg.ShardingKey] {
				seenKey[msg.ShardingKey] = true
				orderedKeys = append(orderedKeys, msg.ShardingKey)
			}
			maxOrderedID = max(maxOrderedID, rows[i].id)
		}
	}

	units, err := r.plan(ctx, items, orderedKeys, maxOrderedID)
	if err != nil {
		return Stats{}, err
	}
	r.publish(ctx, units, items, results)
	outage := brokerOutage(results)
	if outage != nil {
		// Nothing reached the broker and nothing is wrong with the messages: spend none of
		// their retries. They stay due; the caller backs off and tries again.
		for i := range results {
			if results[i].kind == retry {
				results[i] = result{kind: held}
			}
		}
	}
	st, err := r.writeBack(ctx, rows, results)
	err = errors.Join(err, outage)
	r.cfg.Metrics.observeBatch(r.cfg.Table, time.Since(start))
	if st.Changed() > 0 || st.Held > 0 {
		r.log.Info().Int("read", len(rows)).Int("sent", st.Sent).Int("retried", st.Retried).Int("dead", st.Dead).
			Int("held", st.Held).Dur("took", time.Since(start)).Msg("batch")
	}
	return st, err
}

// prepare turns a row into a message and finds its route; an error is permanent: the row
// can never be sent as it is.
func (r *Relay) prepare(rw *row) (*Message, Route, error) {
	if err := outbox.ValidateTopic(rw.topic); err != nil {
		return nil, Route{}, fmt.Errorf("invalid topic: %w", err)
	}
	if err := outbox.ValidateTag(rw.tag); err != nil {
		return nil, Route{}, fmt.Errorf("invalid tag: %w", err)
	}
	if len(rw.content) > r.cfg.MaxBodyBytes {
		return nil, Route{}, fmt.Errorf("body is %d bytes, over the limit of %d (relay.max_body_bytes)", len(rw.content), r.cfg.MaxBodyBytes)
	}
	props, err := outbox.ParseProperties(rw.properties.String)
	if err != nil {
		return nil, Route{}, fmt.Errorf("malformed properties: %w", err)
	}
	route, ok := r.cfg.Router.Route(rw.topic, rw.tag)
	if !ok {
		if r.cfg.Unrouted == UnroutedDead {
			return nil, Route{}, fmt.Errorf("no route for topic %q tag %q (relay.unrouted is dead)", rw.topic, rw.tag)
		}
		route = Route{}
	}
	return &Message{
		ID: rw.id, MsgID: rw.msgID, Topic: rw.topic, Tag: rw.tag,
		Keys: strings.Fields(rw.keys), ShardingKey: rw.shardingKey, Body: rw.content,
		Properties: props, RetryCount: rw.retryCount, MaxRetries: rw.maxRetries,
	}, route, nil
}

// unit is the work of one goroutine: a batch request, a single message, or the chain of an
// ordered key, published one after the other.
type unit struct {
	idx   []int
	batch bool
	chain bool
}

// plan groups the prepared items into units. An ordered key's rows may go only as the prefix
// of its unsent rows that is present in this batch: a row behind an earlier unsent row
// (failed and waiting, or not yet due) is held back.
func (r *Relay) plan(ctx context.Context, items []item, orderedKeys []string, maxOrderedID int64) ([]unit, error) {
	var unsent map[orderKey][]int64
	if len(orderedKeys) > 0 {
		var err error
		if unsent, err = r.store.unsentUpTo(ctx, orderedKeys, maxOrderedID); err != nil {
			return nil, err
		}
	}
	chains := map[orderKey][]int{}
	var chainOrder []orderKey
	type batchKey struct {
		group, topic string
		timeout      time.Duration
	}
	batches := map[batchKey][]int{}
	var batchOrder []batchKey
	var units []unit
	for i, it := range items {
		if it.msg == nil {
			continue
		}
		switch {
		case it.route.Ordered && it.msg.ShardingKey != "":
			k := orderKey{it.msg.Topic, it.msg.ShardingKey}
			if _, ok := chains[k]; !ok {
				chainOrder = append(chainOrder, k)
			}
			chains[k] = append(chains[k], i)
		case !r.cfg.DisableBatchSend && it.route.DelayLevel == 0 && it.msg.ShardingKey == "":
			k := batchKey{it.route.Group, it.msg.Topic, it.route.SendTimeout}
			if _, ok := batches[k]; !ok {
				batchOrder = append(batchOrder, k)
			}
			batches[k] = append(batches[k], i)
		default:
			units = append(units, unit{idx: []int{i}})
		}
	}
	for _, k := range chainOrder {
		idx := chains[k]
		slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(items[a].row.id, items[b].row.id) })
		ids := unsent[k]
		var ok []int
		for n, i := range idx {
			if n >= len(ids) || ids[n] != items[i].row.id {
				break // an earlier unsent row of this key is not in the batch
			}
			ok = append(ok, i)
		}
		if len(ok) > 0 {
			units = append(units, unit{idx: ok, chain: true})
		}
	}
	for _, k := range batchOrder {
		idx := batches[k]
		var cur []int
		size := 0
		for _, i := range idx {
			n := len(items[i].msg.Body)
			if len(cur) > 0 && (len(cur) >= r.cfg.MaxBatchMessages || size+n > r.cfg.MaxBatchBytes) {
				units = append(units, unit{idx: cur, batch: len(cur) > 1})
				cur, size = nil, 0
			}
			cur = append(cur, i)
			size += n
		}
		if len(cur) > 0 {
			units = append(units, unit{idx: cur, batch: len(cur) > 1})
		}
	}
	return units, nil
}

// publish runs the units on at most Concurrency goroutines. Each unit writes only its own
// rows' results, so no lock is needed.
func (r *Relay) publish(ctx context.Context, units []unit, items []item, results []result) {
	work := make(chan unit)
	var wg sync.WaitGroup
	for w := 0; w < min(r.cfg.Concurrency, len(units)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				r.runUnit(ctx, u, items, results)
			}
		}()
	}
	for _, u := range units {
		if ctx.Err() != nil {
			break // the rest stay due
		}
		work <- u
	}
	close(work)
	wg.Wait()
}

func (r *Relay) runUnit(ctx context.Context, u unit, items []item, results []result) {
	switch {
	case u.batch:
		msgs := make([]*Message, len(u.idx))
		for n, i := range u.idx {
			msgs[n] = items[i].msg
		}
		err := r.send(ctx, items[u.idx[0]].route, msgs...)
		if err == nil {
			for _, i := range u.idx {
				results[i] = result{kind: sent}
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if !IsRefused(err) {
			// The broker did not answer (unreachable, timeout, dropped connection): every
			// message would fail alike.
			for _, i := range u.idx {
				results[i] = failResult(err)
			}
			return
		}
		// The broker refused the batch: find out which message it refuses.
		r.log.Debug().Err(err).Int("messages", len(u.idx)).Msg("batch send refused, sending one by one")
		for _, i := range u.idx {
			r.sendOne(ctx, items[i], &results[i])
		}
	case u.chain:
		for _, i := range u.idx {
			r.sendOne(ctx, items[i], &results[i])
			if results[i].kind != sent && results[i].kind != dead {
				return // a failed or abandoned message holds back the rest of its key
			}
		}
	default:
		r.sendOne(ctx, items[u.idx[0]], &results[u.idx[0]])
	}
}

func (r *Relay) sendOne(ctx context.Context, it item, res *result) {
	if ctx.Err() != nil {
		return // abandoned: the row stays due
	}
	err := r.send(ctx, it.route, it.msg)
	switch {
	case err == nil:
		*res = result{kind: sent}
	case ctx.Err() != nil:
		// Abandoned mid-send: whether the broker stored it is unknown, and the row stays due.
	default:
		*res = failResult(err)
	}
	r.log.Debug().Str("msg_id", it.msg.MsgID).Int64("id", it.msg.ID).Err(err).Msg("send")
}

func failResult(err error) result {
	if IsPermanent(err) {
		return result{kind: dead, reason: "refused by the broker: " + err.Error()}
	}
	return result{kind: retry, reason: err.Error(), err: err}
}

func (r *Relay) send(ctx context.Context, route Route, msgs ...*Message) error {
	start := time.Now()
	err := r.pub.Send(ctx, route, msgs...)
	r.cfg.Metrics.observePublish(r.cfg.Table, time.Since(start))
	return err
}

// writeBack records the batch's results with a few set-based UPDATEs: one for the sent rows,
// one per previous retry count for the failed ones (their next time depends on it), one for
// the dead. It runs even when ctx is done, so an acknowledged message is not sent again.
func (r *Relay) writeBack(ctx context.Context, rows []row, results []result) (Stats, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	nowMs := time.Now().UnixMilli()
	var st Stats
	st.Read = len(rows)
	var sentIDs []int64
	var deadRows []failure
	retries := map[int][]failure{}
	var retryOrder []int
	for i, res := range results {
		rw := &rows[i]
		switch res.kind {
		case sent:
			sentIDs = append(sentIDs, rw.id)
		case dead:
			deadRows = append(deadRows, failure{rw.id, res.reason})
		case retry:
			if _, ok := retries[rw.retryCount]; !ok {
				retryOrder = append(retryOrder, rw.retryCount)
			}
			retries[rw.retryCount] = append(retries[rw.retryCount], failure{rw.id, res.reason})
		default:
			st.Held++
		}
	}
	var errs []error
	if len(sentIDs) > 0 {
		markSent := r.store.markSent
		if r.cfg.perRowWriteBack {
			markSent = r.store.markSentPerRow
		}
		n, err := markSent(wctx, sentIDs, nowMs)
		st.Sent = int(n)
		errs = append(errs, err)
		r.warnRaced("sent", len(sentIDs), n)
	}
	for _, rc := range retryOrder {
		fails := retries[rc]
		next := nowMs + r.cfg.Backoff.Delay(rc, r.cfg.Rand).Milliseconds()
		markRetry := r.store.markRetry
		if r.cfg.perRowWriteBack {
			markRetry = r.store.markRetryPerRow
		}
		n, err := markRetry(wctx, rc, fails, next)
		st.Retried += int(n)
		errs = append(errs, err)
		r.warnRaced("retry", len(fails), n)
	}
	if len(deadRows) > 0 {
		n, err := r.store.markDead(wctx, deadRows)
		st.Dead = int(n)
		errs = append(errs, err)
		r.warnRaced("dead", len(deadRows), n)
		for _, d := range deadRows {
			r.log.Warn().Int64("id", d.id).Str("reason", d.reason).Msg("message dead")
		}
	}
	r.countResults(rows, results)
	return st, errors.Join(errs...)
}

// warnRaced notes rows that another relay changed between our read and our write: harmless
// (the guard kept the newer state), but a sign that two relays ran at once.
func (r *Relay) warnRaced(what string, want int, got int64) {
	if int64(want) != got {
		r.log.Warn().Str("update", what).Int("rows", want).Int64("changed", got).
			Msg("rows changed by another relay meanwhile; kept their newer state")
	}
}

func (r *Relay) countResults(rows []row, results []result) {
	m := r.cfg.Metrics
	if m == nil {
		return
	}
	for i, res := range results {
		rw := &rows[i]
		switch res.kind {
		case sent:
			m.published.WithLabelValues(r.cfg.Table, rw.topic, rw.tag).Inc()
		case retry:
			m.failed.WithLabelValues(r.cfg.Table, rw.topic, rw.tag).Inc()
			if rw.retryCount+1 > rw.maxRetries {
				m.dead.WithLabelValues(r.cfg.Table, rw.topic, rw.tag).Inc()
			}
		case dead:
			m.dead.WithLabelValues(r.cfg.Table, rw.topic, rw.tag).Inc()
		}
	}
}
