// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
)

// readyRetry is how often an auditor that cannot run (no stored-position journal, brokers
// that cannot be asked) looks again.
const readyRetry = 5 * time.Minute

// Run audits the table until ctx ends, while Owner reports this process the owner: the rows
// of the journal entries settled between MaxAge and MinAge ago and not yet audited, oldest
// first, at Rate rows a second; missing ones are made due again. When the table or the brokers do not
// allow an audit it says so (log and Status) and looks again every few minutes: it never
// passes silently.
func (a *Auditor) Run(ctx context.Context) error {
	log := a.cfg.Log.With().Str("database", a.cfg.Database).Str("table", a.cfg.Table).Logger()
	for {
		err := a.Ready(ctx)
		a.setStatus(err)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Warn().Err(err).Msg("broker audit OFF: acknowledged messages the broker loses are not found")
		if !a.cfg.Sleep(ctx, readyRetry) {
			return nil
		}
	}
	log.Info().Dur("min_age", a.cfg.MinAge).Dur("max_age", a.cfg.MaxAge).Float64("rate", a.cfg.Rate).
		Msg("broker audit on: sent rows are checked against the broker")
	var cur storedlog.Cursor
	for ctx.Err() == nil {
		owner := a.cfg.Owner == nil || a.cfg.Owner()
		a.setOwner(owner)
		if !owner {
			a.cfg.Metrics.SetLag(a.cfg.Database, a.cfg.Table, 0)
			cur = storedlog.Cursor{}
			a.cfg.Sleep(ctx, time.Second)
			continue
		}
		next, caughtUp := a.round(ctx, cur)
		cur = next
		if caughtUp {
			cur = storedlog.Cursor{}
			a.cfg.Sleep(ctx, a.cfg.Idle)
		}
	}
	return nil
}

// round checks one batch after cur and returns the next cursor, and whether the window has
// no rows left to check.
func (a *Auditor) round(ctx context.Context, cur storedlog.Cursor) (storedlog.Cursor, bool) {
	nowMs, err := a.st.now(ctx)
	if err != nil {
		a.failed(ctx, err)
		return cur, true
	}
	w := window{from: nowMs - a.cfg.MaxAge.Milliseconds(), to: nowMs - a.cfg.MinAge.Milliseconds()}
	if cur.SettledMs < w.from {
		cur = storedlog.Cursor{SettledMs: w.from}
	}
	rep, next, done, err := a.step(ctx, w, cur, true, nowMs)
	a.cfg.Metrics.Add(a.cfg.Database, a.cfg.Table, rep)
	a.count(rep)
	a.logFindings(rep)
	if err != nil {
		a.failed(ctx, err)
		return cur, true
	}
	lag := 0.0
	if !done {
		lag = float64(nowMs-next.SettledMs) / 1000
	}
	a.cfg.Metrics.SetLag(a.cfg.Database, a.cfg.Table, lag)
	a.setLag(lag)
	return next, done
}

func (a *Auditor) failed(ctx context.Context, err error) {
	if ctx.Err() == nil {
		a.cfg.Log.Warn().Err(err).Str("table", a.cfg.Table).Msg("broker audit: a round failed; tried again")
	}
}

// logFindings logs what a round found missing, the ordered keys by name.
func (a *Auditor) logFindings(rep Report) {
	if rep.Missing == 0 {
		return
	}
	ev := a.cfg.Log.Error().Str("database", a.cfg.Database).Str("table", a.cfg.Table).Int("missing", rep.Missing).Int("repaired", rep.Repaired)
	if keys := rep.OrderedKeys(); len(keys) > 0 {
		ev = ev.Int("ordered_repaired", rep.RepairedOrdered).Str("ordered_keys", strings.Join(keys, " "))
	}
	for i, l := range rep.Lost {
		if i == 20 {
			break
		}
		a.cfg.Log.Warn().Int64("id", l.ID).Str("msg_id", l.MsgID).Str("topic", l.Topic).Str("sharding_key", l.ShardingKey).
			Bool("ordered", l.Ordered).Str("reason", l.Reason).Msg("broker audit: message lost by the broker after acknowledgement; sent again")
	}
	ev.Msg("broker audit: the broker lost acknowledged messages; they are due again and will be sent with their msg_id and keys")
}

// Status returns nil while the audit runs, else why it does not (as last found).
func (a *Auditor) Status() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

func (a *Auditor) setStatus(err error) {
	a.mu.Lock()
	a.status = err
	a.state.Ready = err == nil
	a.mu.Unlock()
}

// PartitionOwner is a relay group's partitions held by this process (relay.Group's Owned).
type PartitionOwner interface{ Owned() []int }

// OwnerOf returns Config.Owner for the audit of g's table: this process runs it while it
// holds partition 0 (the whole table's lock with one partition), so one relay of the group
// audits at a time and the audit moves with that lock.
func OwnerOf(g PartitionOwner) func() bool {
	return func() bool { return slices.Contains(g.Owned(), 0) }
}
