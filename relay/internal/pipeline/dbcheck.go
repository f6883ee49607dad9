// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// dbClock is the database's clock as last read, carried forward on the relay's own clock in
// between: every age and due time the relay reads or writes (which rows are due, a retry's
// next_retry_time, sent_time, the oldest due row's age) is the database's, whatever the
// relay's host clock says. The offset is read again with every check of the database
// (CheckDatabase, once per quarter of the lock's TTL while leading) and before any use once
// it is older than clockMaxAge.
type dbClock struct {
	mu     sync.Mutex
	offset int64     // database epoch ms minus the relay's, when last read
	read   time.Time // when it was last read (the relay's clock, monotonic); zero: never
}

// clockMaxAge bounds how long an offset read is used without reading it again.
const clockMaxAge = 5 * time.Second

// dbNowSQL is the database's clock in epoch ms, as settledNowSQL writes it.
const dbNowSQL = outboxsql.NowSQL

// DBNow returns the database's clock in epoch ms, read from the database when the offset
// known is older than clockMaxAge.
func (r *Engine) DBNow(ctx context.Context) (int64, error) {
	now := r.cfg.Now()
	r.clock.mu.Lock()
	offset, read := r.clock.offset, r.clock.read
	r.clock.mu.Unlock()
	if !read.IsZero() && now.Sub(read) < clockMaxAge {
		return now.UnixMilli() + offset, nil
	}
	st, err := r.readDatabase(ctx)
	if err != nil {
		return 0, err
	}
	return st.nowMs, nil
}

// dbState is what CheckDatabase reads of the server a pooled connection reaches.
type dbState struct {
	nowMs    int64 // the database's clock, epoch ms
	readOnly bool  // read_only or innodb_read_only: every write refused
}

// readDatabase reads the database's clock and whether it accepts writes, in one statement,
// and records the clock's offset.
func (r *Engine) readDatabase(ctx context.Context) (dbState, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	before := r.cfg.Now()
	var st dbState
	err := r.store.QueryRow(ctx, "SELECT "+dbNowSQL+", @@global.read_only <> 0 OR @@innodb_read_only <> 0").Scan(&st.nowMs, &st.readOnly)
	if err != nil {
		return dbState{}, fmt.Errorf("read the database's clock: %w", err)
	}
	after := r.cfg.Now()
	mid := before.Add(after.Sub(before) / 2) // the answer's moment, as near as we know it
	r.clock.mu.Lock()
	r.clock.offset, r.clock.read = st.nowMs-mid.UnixMilli(), after
	r.clock.mu.Unlock()
	return st, nil
}

// CheckDatabase reads the database's clock and whether the server the pool reaches accepts
// writes. A read-only server (the old primary after a failover, left running read-only, that
// the pool's old connections still reach while new ones go to the new primary) counts on
// the stall clock as refused writes, so that a leader that cannot get away from it gives the
// lock up; and its connections are dropped, so that the next statements dial again. An idle
// leader learns of a failover this way: it only reads, and reads pass on a read-only server.
func (r *Engine) CheckDatabase(ctx context.Context) {
	st, err := r.readDatabase(ctx)
	switch {
	case err != nil:
		return // no answer: the stall clock counts it already
	case st.readOnly:
		n := r.redial(ctx)
		r.progress.foundReadOnly(true)
		r.log.Warn().Int("connections_dropped", n).
			Msg("the database the relay reaches is read-only (a failover?): its connections are dropped and dialled again")
	default:
		r.progress.foundReadOnly(false)
	}
}

// checkEvery bounds how often CheckDatabaseAsync asks: an idle leader's load on its database
// grows by one cheap statement per second at most (a lock TTL of 2 s renews every 0.5 s).
const checkEvery = time.Second

// CheckDatabaseAsync starts CheckDatabase under ctx as a service of its own (DatabaseCheck),
// unless one still runs or the last began less than checkEvery ago: the lock's extension
// never waits for the database.
func (r *Engine) CheckDatabaseAsync(ctx context.Context) {
	now := int64(time.Since(r.progress.start))
	if last := r.lastCheck.Load(); last != 0 && now-last < int64(checkEvery) {
		return
	}
	select {
	case <-r.check.Stopped():
	default:
		return // the last check still runs
	}
	r.lastCheck.Store(now)
	_ = r.check.Start(ctx) // a Func never fails to start
}

// DatabaseCheck is the service CheckDatabaseAsync starts: its caller stops it (Stop waits
// for a check under way) before it ends.
func (r *Engine) DatabaseCheck() startstop.Service { return r.check }

// redial drops the pool's idle connections that reach a read-only server (or do not answer),
// and returns how many it dropped: database/sql dials again for the next statements. A
// connection in use is left to its statement; the next check finds it if it is one of them.
func (r *Engine) redial(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout) // a full pool makes Conn wait
	defer cancel()
	idle := r.db.Stats().Idle
	var held []*sql.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	dropped := 0
	for range idle + 1 {
		c, err := r.db.Conn(ctx)
		if err != nil {
			break
		}
		if connWritable(ctx, c, r.cfg.QueryTimeout) {
			held = append(held, c) // held until the end, so that the next Conn is another
			continue
		}
		// A Raw function returning ErrBadConn makes database/sql close the connection.
		_ = c.Raw(func(any) error { return driver.ErrBadConn })
		c.Close()
		dropped++
	}
	return dropped
}

// connWritable reports whether the server that c reaches answers and accepts writes.
func connWritable(ctx context.Context, c *sql.Conn, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ro bool
	err := c.QueryRowContext(ctx, "SELECT @@global.read_only <> 0 OR @@innodb_read_only <> 0").Scan(&ro)
	return err == nil && !ro
}
