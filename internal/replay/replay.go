// SPDX-License-Identifier: Apache-2.0

// Package replay re-publishes sent outbox rows (outbox-relay replay, the dashboard's replay):
// it reads the rows a filter selects in pages (ops.ReplayReader), turns each into the message
// the relay sent for it (the same OUTBOX_MSG_ID, keys, tag, sharding key and route), marks
// the copy with outbox.ReplayProperty, and sends it through the relay's Publisher at a rate
// limit. It changes no row: a replay is not a delivery.
package replay

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/message"
)

// Defaults of Config.
const (
	DefaultRate     = 500
	DefaultPageSize = 500
	DefaultBatch    = 32
	DefaultAttempts = 3
	// DefaultConcurrency is the requests in flight at once.
	DefaultConcurrency = 4
)

// Config is one replay of one table.
type Config struct {
	DB     *sql.DB
	Table  string
	Filter ops.ReplayFilter
	// After resumes a run: only rows with a higher id are replayed (0: from the start).
	After int64
	// Publisher sends the copies; the relay's RocketMQPublisher in production.
	Publisher relay.Publisher
	// Router chooses each copy's route as the relay does; nil routes every message with the
	// publisher's defaults.
	Router relay.Router
	// UnroutedDead skips the rows no route matches (relay.unrouted: dead) instead of sending
	// them with the defaults.
	UnroutedDead bool
	// MaxBodyBytes skips bodies over the relay's limit (0: outbox.DefaultMaxBodyBytes).
	MaxBodyBytes int
	// Rate is the most messages a second (DefaultRate when 0); Burst the most sent at once
	// (Batch when 0).
	Rate  float64
	Burst int
	// Batch is the most messages of one request (DefaultBatch when 0).
	Batch int
	// PageSize is the rows read at once (DefaultPageSize when 0).
	PageSize int
	// Concurrency is how many requests are in flight at once (DefaultConcurrency when 0);
	// requests of one queue or key are never in flight together.
	Concurrency int
	// Attempts is how many times a failed request is tried before the run stops (DefaultAttempts).
	Attempts int
	// Clock measures the rate; SystemClock when nil.
	Clock Clock
	// RunID names the run in the copies' mark; NewRunID when empty.
	RunID string
	// Progress, when set, gets a line after every page: sent so far and the id to resume after.
	Progress io.Writer
	// Metrics counts what the run sent; nil counts nothing.
	Metrics *Metrics
	// Source names who asked ("cli", "dashboard") in the metrics.
	Source string
}

// Result is what a run did.
type Result struct {
	RunID string `json:"run_id"`
	// Sent counts the messages the broker acknowledged.
	Sent int64 `json:"sent"`
	// Skipped counts the rows that cannot be sent as they are (Skips says why).
	Skipped int64    `json:"skipped"`
	Skips   []string `json:"skips,omitempty"`
	// LastID is the id after which a new run resumes: every selected row up to it was sent
	// or skipped.
	LastID int64 `json:"last_id"`
	// Elapsed is the run's duration by its clock.
	Elapsed time.Duration `json:"-"`
}

// NewRunID returns a fresh run id: "r" and 12 hex digits.
func NewRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "r" + hex.EncodeToString(b)
}

// Count is the dry run: how many rows the run would replay, and the highest id of its walk.
// Give that id to the run (Filter.ToID) so that it sends what was counted, not rows sent
// since.
func Count(ctx context.Context, cfg Config) (n, through int64, err error) {
	r, err := ops.NewReplayReader(ctx, cfg.DB, cfg.Table, cfg.Filter, cfg.After)
	if err != nil {
		return 0, 0, err
	}
	n, err = r.Count(ctx)
	return n, r.End(), err
}

// run is one replay in progress.
type run struct {
	cfg    Config
	lim    *Limiter
	mark   string
	routes map[[2]string]routed
	res    Result
	sent   atomic.Int64 // the copies acknowledged, counted by the senders
}

// Run replays the selected rows in id order and returns what it did. On an error (the
// broker unreachable after cfg.Attempts, ctx cancelled) Result.LastID says where to resume.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg = withDefaults(cfg)
	lim, err := NewLimiter(cfg.Rate, cfg.Burst, cfg.Clock)
	if err != nil {
		return Result{}, err
	}
	rd, err := ops.NewReplayReader(ctx, cfg.DB, cfg.Table, cfg.Filter, cfg.After)
	if err != nil {
		return Result{}, err
	}
	start := cfg.Clock.Now()
	r := &run{cfg: cfg, lim: lim, mark: cfg.RunID + " " + start.UTC().Format(time.RFC3339),
		routes: map[[2]string]routed{}, res: Result{RunID: cfg.RunID, LastID: rd.After()}}
	err = r.loop(ctx, rd)
	r.res.Elapsed = cfg.Clock.Now().Sub(start)
	outcome := "done"
	if err != nil {
		outcome = "failed"
	}
	cfg.Metrics.run(cfg.Source, outcome)
	return r.res, err
}

// loop sends page after page until the reader is done. The next page is read while one is
// sent, so that reading costs the rate nothing (two pages in memory at most).
func (r *run) loop(ctx context.Context, rd *ops.ReplayReader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan readPage, 1)
	go func() {
		defer close(pages)
		for {
			rows, err := rd.Next(ctx, r.cfg.PageSize)
			select {
			case pages <- readPage{rows, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(rows) == 0 {
				return
			}
		}
	}()
	for p := range pages {
		if p.err != nil || len(p.rows) == 0 {
			return p.err
		}
		err := r.page(ctx, p.rows)
		r.res.Sent = r.sent.Load()
		if err != nil {
			return fmt.Errorf("replay run %s stopped after id %d: %w", r.cfg.RunID, r.res.LastID, err)
		}
		r.res.LastID = p.rows[len(p.rows)-1].ID
		if r.cfg.Progress != nil {
			fmt.Fprintf(r.cfg.Progress, "replay %s: sent %d, skipped %d, last id %d\n", r.cfg.RunID, r.res.Sent, r.res.Skipped, r.res.LastID)
		}
	}
	return ctx.Err()
}

// readPage is a page read ahead, or the error that ended the reading.
type readPage struct {
	rows []ops.ReplayRow
	err  error
}

func withDefaults(cfg Config) Config {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Burst <= 0 {
		cfg.Burst = cfg.Batch
	}
	cfg.Batch = min(cfg.Batch, cfg.Burst)
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.Clock == nil {
		cfg.Clock = SystemClock{}
	}
	if cfg.RunID == "" {
		cfg.RunID = NewRunID()
	}
	if cfg.Router == nil {
		cfg.Router = relay.DefaultRouter
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = outbox.DefaultMaxBodyBytes
	}
	if cfg.Source == "" {
		cfg.Source = "cli"
	}
	return cfg
}

// page sends one page's rows: grouped into requests of one topic, route and queue, each
// group in id order, so that a key's messages keep their order.
func (r *run) page(ctx context.Context, rows []ops.ReplayRow) error {
	var groups []*group
	byKey := map[groupKey]*group{}
	for i := range rows {
		m, route, err := r.message(&rows[i])
		if err != nil {
			r.skip(rows[i], err)
			continue
		}
		k := groupKey{topic: m.Topic, route: route, queue: r.queueOf(m)}
		g := byKey[k]
		if g == nil {
			g = &group{route: route}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.msgs = append(g.msgs, m)
	}
	return r.sendGroups(ctx, groups)
}

// sendGroups sends the groups of a page, cfg.Concurrency at a time, each group's requests
// one after the other; the first error stops the rest.
func (r *run) sendGroups(ctx context.Context, groups []*group) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, r.cfg.Concurrency)
	errs := make(chan error, len(groups))
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			for len(g.msgs) > 0 && ctx.Err() == nil {
				n := min(len(g.msgs), r.cfg.Batch)
				if err := r.send(ctx, g.route, g.msgs[:n]); err != nil {
					errs <- err
					cancel()
					return
				}
				g.msgs = g.msgs[n:]
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// groupKey is what the messages of one request share.
type groupKey struct {
	topic string
	route relay.Route
	queue string
}

type group struct {
	route relay.Route
	msgs  []*relay.Message
}

// queueOf names the queue a keyed message goes to, as the relay's batching does: messages
// of several keys share a request only on one queue. A key whose queue is not known yet
// goes in requests of its own key.
func (r *run) queueOf(m *relay.Message) string {
	if m.ShardingKey == "" {
		return ""
	}
	if kb, ok := r.cfg.Publisher.(relay.KeyBatcher); ok {
		if q, ok := kb.QueueOf(m.Topic, m.ShardingKey); ok {
			return "q:" + q
		}
	}
	return "k:" + m.ShardingKey
}

// send sends one request at the rate limit, trying a failure again up to cfg.Attempts
// times (a copy too many is what the consumers' dedupe is for).
func (r *run) send(ctx context.Context, route relay.Route, msgs []*relay.Message) error {
	if err := r.lim.Wait(ctx, len(msgs)); err != nil {
		return err
	}
	var err error
	for attempt := 1; attempt <= r.cfg.Attempts; attempt++ {
		if err = r.cfg.Publisher.Send(ctx, route, msgs...); err == nil {
			r.sent.Add(int64(len(msgs)))
			r.cfg.Metrics.sent(r.cfg.Source, len(msgs))
			return nil
		}
		if ctx.Err() != nil || relay.KindOf(err) == relay.SendPermanent {
			break
		}
		if len(msgs) > 1 && relay.KindOf(err) == relay.SendRefused {
			return r.sendEach(ctx, route, msgs)
		}
		if serr := r.cfg.Clock.Sleep(ctx, time.Duration(attempt)*time.Second); serr != nil {
			return serr
		}
	}
	return fmt.Errorf("send %d message(s) of topic %s (ids %d-%d): %w", len(msgs), msgs[0].Topic, msgs[0].ID, msgs[len(msgs)-1].ID, err)
}

// sendEach sends a refused batch's messages one request each (their tokens are taken).
func (r *run) sendEach(ctx context.Context, route relay.Route, msgs []*relay.Message) error {
	for _, m := range msgs {
		var err error
		for attempt := 1; attempt <= r.cfg.Attempts; attempt++ {
			if err = r.cfg.Publisher.Send(ctx, route, m); err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("send message id %d of topic %s: %w", m.ID, m.Topic, err)
		}
		r.sent.Add(1)
		r.cfg.Metrics.sent(r.cfg.Source, 1)
	}
	return nil
}

// skip records a row that cannot be sent as it is.
func (r *run) skip(row ops.ReplayRow, err error) {
	r.res.Skipped++
	r.cfg.Metrics.skipped(r.cfg.Source)
	if len(r.res.Skips) < 100 {
		r.res.Skips = append(r.res.Skips, fmt.Sprintf("id %d msg_id %s: %v", row.ID, row.MsgID, err))
	}
}

// routed is a topic and tag's route, or why its rows cannot be sent.
type routed struct {
	route relay.Route
	err   error
}

// message turns a row into the message the relay sent for it, marked as a replay, and finds
// its route: the relay's own checks (message.FromRow) after the topic and tag's route.
func (r *run) message(row *ops.ReplayRow) (*relay.Message, relay.Route, error) {
	rt := r.routeOf(row.Topic, row.Tag)
	if rt.err != nil {
		return nil, relay.Route{}, rt.err
	}
	m, err := message.FromRow(message.Row{ID: row.ID, MsgID: row.MsgID, Topic: row.Topic, Tag: row.Tag, Keys: row.Keys,
		ShardingKey: row.ShardingKey, Props: row.Properties, Body: row.Body, BodyLen: int64(len(row.Body))}, r.cfg.MaxBodyBytes)
	if err != nil {
		return nil, relay.Route{}, err
	}
	if m.Properties == nil {
		m.Properties = map[string]string{}
	}
	m.Properties[outbox.ReplayProperty] = r.mark
	return m, rt.route, nil
}

func (r *run) routeOf(topic, tag string) routed {
	k := [2]string{topic, tag}
	if rt, ok := r.routes[k]; ok {
		return rt
	}
	var rt routed
	if err := outbox.ValidateTopic(topic); err != nil {
		rt.err = fmt.Errorf("invalid topic: %w", err)
	} else if err := outbox.ValidateTag(tag); err != nil {
		rt.err = fmt.Errorf("invalid tag: %w", err)
	} else if route, ok := r.cfg.Router.Route(topic, tag); ok {
		rt.route = route
	} else if r.cfg.UnroutedDead {
		rt.err = fmt.Errorf("no route for topic %q tag %q (relay.unrouted is dead)", topic, tag)
	}
	r.routes[k] = rt
	return rt
}
