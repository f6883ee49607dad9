// SPDX-License-Identifier: Apache-2.0

// Package auditor checks sent outbox rows against the broker: a message the broker
// acknowledged and then lost (a crash before its flush, a failover to a replica without the
// tail) is found through a brokeraudit.Lookup and made due again, so the relay sends it
// again with the same msg_id and keys. The relay records where each message was stored in
// the table's stored-position journal (internal/storedlog), one entry per write-back; the
// auditor reads the entries not yet audited, oldest first, within a trailing window: old
// enough that the broker has indexed the message, young enough that its retention still
// holds it.
package auditor

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Config configures an Auditor for one table.
type Config struct {
	// Database and Table name the table; Database is the metrics' and logs' label.
	Database, Table string
	// MinAge: rows sent more recently are not checked yet. Default 1 minute.
	MinAge time.Duration
	// MaxAge: rows sent longer ago are not checked (keep it within the broker's
	// retention). Default 24 hours.
	MaxAge time.Duration
	// Rate bounds the rows checked per second. Default 200.
	Rate float64
	// Batch is the rows read, looked up and written back at a time (at most 1000); a step
	// reads about as many rows' worth of journal entries.
	// Default 100.
	Batch int
	// Idle is the pause once every row in the window is checked. Default 10 seconds.
	Idle time.Duration
	// Namespace is the RocketMQ namespace the relay sends in (rocketmq.namespace): the
	// broker names a row's topic "namespace%topic". Empty: none.
	Namespace string
	// Ordered says whether a topic and tag go by an ordered route (nil: none does).
	Ordered func(topic, tag string) bool
	// Owner reports whether this process runs the audit now (the group's owner); nil: always.
	Owner func() bool
	// QueryTimeout bounds each statement. Default 10 seconds.
	QueryTimeout time.Duration
	// Log receives the audit's findings.
	Log zerolog.Logger
	// Metrics counts them; nil counts nothing.
	Metrics *Metrics
	// Sleep waits d or until ctx ends, and reports whether ctx is still live; nil: a timer.
	Sleep func(ctx context.Context, d time.Duration) bool
}

func (c *Config) setDefaults() {
	if c.MinAge <= 0 {
		c.MinAge = time.Minute
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 24 * time.Hour
	}
	if c.Rate <= 0 {
		c.Rate = 200
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	c.Batch = min(c.Batch, 1000)
	if c.Idle <= 0 {
		c.Idle = 10 * time.Second
	}
	if c.QueryTimeout <= 0 {
		c.QueryTimeout = 10 * time.Second
	}
	if c.Sleep == nil {
		c.Sleep = startstop.Sleep
	}
}

// Auditor audits one table.
type Auditor struct {
	cfg    Config
	lookup brokeraudit.Lookup
	st     *store
	mu     sync.Mutex
	status error // why the audit does not run; guarded by mu
	state  State // guarded by mu
	// perEntry is the rows per journal entry the last step found (entryLimit).
	perEntry atomic.Int64
}

// New returns the auditor of cfg.Table, whose positions lookup checks.
func New(db *sql.DB, lookup brokeraudit.Lookup, cfg Config) (*Auditor, error) {
	if err := schema.ValidateIdent(cfg.Table); err != nil {
		return nil, fmt.Errorf("auditor: %w", err)
	}
	if lookup == nil {
		return nil, errors.New("auditor: no broker lookup")
	}
	cfg.setDefaults()
	j, err := storedlog.Open(db, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("auditor: %w", err)
	}
	st := &store{db: db, table: schema.QuoteIdent(cfg.Table), name: cfg.Table, journal: j, timeout: cfg.QueryTimeout}
	return &Auditor{cfg: cfg, lookup: lookup, st: st}, nil
}

// Ready returns nil when the table can be audited (it has its stored-position journal) and
// the brokers can be asked; otherwise why not, for the start log and `outbox-relay check`.
func (a *Auditor) Ready(ctx context.Context) error {
	ok, err := schema.HasStoredLog(ctx, a.st.db, a.cfg.Table)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("table %s has no stored-position journal: positions are not recorded; "+
			"run `outbox-relay migrate` to create %s", a.cfg.Table, a.st.journal.Name())
	}
	if err := brokeraudit.CanAsk(ctx, a.lookup); err != nil {
		return err
	}
	return a.prepare(ctx)
}

// prepare finds the width of fail_reason.
func (a *Auditor) prepare(ctx context.Context) error {
	var err error
	a.st.reasonChars, err = outboxsql.FailReasonWidth(ctx, a.st.db, a.cfg.Table)
	return err
}

// Report is what one audit found.
type Report struct {
	// Checked rows were looked up; Present, Missing and Unknown split them by verdict.
	Checked, Present, Missing, Unknown int
	// Corrupt counts the journal entries that did not decode: their rows are not checked,
	// and the entries are passed (marked audited), never blocking later ones.
	Corrupt int
	// Repaired of the missing were made due again; RepairedOrdered of those are rows of an
	// ordered route with a sharding key.
	Repaired, RepairedOrdered int
	// Lost lists the missing rows (at most maxListed).
	Lost []Lost
}

// Lost is one row whose message the broker no longer holds.
type Lost struct {
	ID                    int64
	MsgID, Topic, Tag     string
	ShardingKey, Reason   string
	Ordered, Repaired     bool
	Broker                string
	QueueID               int
	QueueOffset, SentAtMs int64
}

// maxListed bounds Report.Lost.
const maxListed = 10000

func (r *Report) add(o Report) {
	r.Checked += o.Checked
	r.Present += o.Present
	r.Missing += o.Missing
	r.Unknown += o.Unknown
	r.Corrupt += o.Corrupt
	r.Repaired += o.Repaired
	r.RepairedOrdered += o.RepairedOrdered
	r.Lost = append(r.Lost, o.Lost[:min(len(o.Lost), max(0, maxListed-len(r.Lost)))]...)
}

// OrderedKeys returns the distinct topic/sharding keys of the ordered rows repaired.
func (r Report) OrderedKeys() []string {
	var keys []string
	for _, l := range r.Lost {
		if l.Ordered && l.Repaired && !slices.Contains(keys, l.Topic+"/"+l.ShardingKey) {
			keys = append(keys, l.Topic+"/"+l.ShardingKey)
		}
	}
	return keys
}
