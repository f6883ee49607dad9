// SPDX-License-Identifier: Apache-2.0

// Package classicrelay reproduces the relay of the classic local-message table (the "local message table" article the
// project grew from), as a baseline that benchmarks run beside outbox-relay in the
// same run, against the same database and broker. It is not a product: it keeps the seed's
// behaviour, including its costs and its flaws, on purpose.
//
// What it reproduces of LocalMessageScheduledScan.processLocalMessage:
//   - a scheduled job (Spring cron "0 */1 * * * ?": at every whole minute; here every
//     Interval, aligned the same way, and a run that overruns skips the firings it covered);
//   - a Redis lock "LocalMessageScan" taken with tryLock(1, MINUTES): wait up to a minute,
//     lease 30 s renewed by a watchdog every 10 s (Redisson's defaults), released at the end;
//   - one streaming SELECT of id, msg_id, topic, tag, content, retry_count, max_retry_count,
//     next_retry_time WHERE is_deleted = 0 AND (status = 0 OR status = 1) AND
//     next_retry_time < the run's start (no ORDER BY, no LIMIT); rows with
//     retry_count > max_retry_count are skipped;
//   - rows buffered until the buffer holds more than 1000 (BATCH_SIZE), then processed:
//     each message sent synchronously, one at a time;
//   - write-back with MyBatis-Plus updateBatchById: one transaction, one
//     UPDATE ... SET status = 2 WHERE id = ? per sent row; for failed rows listByIds
//     (SELECT ... WHERE id IN (...)) and one UPDATE ... SET status = 1, retry_count = ?,
//     next_retry_time = ?, fail_reason = ? WHERE id = ? per row, next_retry_time being
//     now + min(2^retry_count s, 1 h). The UPDATEs are not guarded by status.
//
// Kept as the seed has it: a row whose retry_count passed max_retry_count is skipped by the
// scan and so never reaches status 3 (the "arrive max retry count" branch cannot run), and a
// relay that lost its lock keeps going until its run ends.
package classicrelay

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Seed 002's constants.
const (
	batchSize   = 1000             // BATCH_SIZE; a batch is processed once the buffer exceeds it
	lockLease   = 30 * time.Second // Redisson's lockWatchdogTimeout
	maxInterval = time.Hour        // getNextRetryTime's cap
)

// Config configures a Relay. Zero fields take the seed's values named in their comments.
type Config struct {
	// Table is the outbox table. Defaults to "local_message".
	Table string
	// Interval is the schedule of the job. Defaults to one minute (the seed's cron).
	Interval time.Duration
	// LockKey is the Redis key of the job's lock. Defaults to "LocalMessageScan".
	LockKey string
	// LockWait bounds the wait for the lock. Defaults to one minute (tryLock(1, MINUTES)).
	LockWait time.Duration
	// Logger receives one line per run at debug. Defaults to a disabled logger.
	Logger *zerolog.Logger
}

// Relay is seed 002's scheduled relay of one table.
type Relay struct {
	cfg Config
	db  *sql.DB
	rdb redis.UniversalClient
	pub relay.Publisher
	q   queries
}

// New checks cfg and returns the seed's relay of cfg.Table, publishing through pub.
func New(db *sql.DB, rdb redis.UniversalClient, pub relay.Publisher, cfg Config) (*Relay, error) {
	if cfg.Table == "" {
		cfg.Table = "local_message"
	}
	if err := schema.ValidateIdent(cfg.Table); err != nil {
		return nil, fmt.Errorf("classicrelay: Table: %w", err)
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("classicrelay: Interval: must be positive, got %s", cfg.Interval)
	}
	if cfg.LockKey == "" {
		cfg.LockKey = "LocalMessageScan"
	}
	if cfg.LockWait == 0 {
		cfg.LockWait = time.Minute
	}
	if cfg.Logger == nil {
		nop := zerolog.Nop()
		cfg.Logger = &nop
	}
	if db == nil || rdb == nil || pub == nil {
		return nil, errors.New("classicrelay: New needs a database, a Redis client and a publisher")
	}
	return &Relay{cfg: cfg, db: db, rdb: rdb, pub: pub, q: newQueries(cfg.Table)}, nil
}

// Stats counts what one run did.
type Stats struct {
	// Sent and Retried count the rows written back as sent and as failed.
	Sent, Retried int
}

// Run fires the job on its schedule until ctx ends. Errors of a run are logged, as the
// seed's scheduler does, and the next firing comes anyway.
func (r *Relay) Run(ctx context.Context) error {
	for {
		now := time.Now()
		next := now.Truncate(r.cfg.Interval).Add(r.cfg.Interval)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		if _, err := r.ProcessOnce(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error().Err(err).Msg("classicrelay: process local messages")
		}
	}
}

// ProcessOnce is one firing of the job: take the lock (or give up after LockWait), stream
// the due rows, send them and write the results back.
func (r *Relay) ProcessOnce(ctx context.Context) (Stats, error) {
	var st Stats
	rs := redsync.New(goredis.NewPool(r.rdb))
	const retryDelay = 20 * time.Millisecond
	mutex := rs.NewMutex(r.cfg.LockKey,
		redsync.WithExpiry(lockLease),
		redsync.WithTries(max(1, int(r.cfg.LockWait/retryDelay))),
		redsync.WithRetryDelay(retryDelay),
	)
	if err := mutex.LockContext(ctx); err != nil {
		r.cfg.Logger.Warn().Err(err).Msg("classicrelay: lock not taken, run skipped")
		return st, nil
	}
	stopWatchdog := watchdog(ctx, mutex)
	defer func() {
		stopWatchdog()
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = mutex.UnlockContext(uctx)
	}()

	start := time.Now()
	rows, err := r.db.QueryContext(ctx, r.q.scan, start.UnixMilli())
	if err != nil {
		return st, fmt.Errorf("classicrelay: scan %s: %w", r.cfg.Table, err)
	}
	defer rows.Close()
	var buf []row
	for rows.Next() {
		var m row
		if err := rows.Scan(&m.id, &m.msgID, &m.topic, &m.tag, &m.content, &m.retryCount, &m.maxRetryCount, &m.nextRetryTime); err != nil {
			return st, fmt.Errorf("classicrelay: scan %s: %w", r.cfg.Table, err)
		}
		if m.retryCount > m.maxRetryCount {
			continue
		}
		buf = append(buf, m)
		if len(buf) > batchSize {
			if err := r.processBatch(ctx, buf, &st); err != nil {
				return st, err
			}
			buf = buf[:0]
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("classicrelay: scan %s: %w", r.cfg.Table, err)
	}
	if len(buf) > 0 {
		if err := r.processBatch(ctx, buf, &st); err != nil {
			return st, err
		}
	}
	r.cfg.Logger.Debug().Int("sent", st.Sent).Int("retried", st.Retried).Dur("took", time.Since(start)).Msg("classicrelay: scan done")
	return st, nil
}

// watchdog renews the lock's lease every third of it, as Redisson's watchdog does, until
// the returned stop is called.
func watchdog(ctx context.Context, mutex *redsync.Mutex) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(lockLease / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				_, _ = mutex.ExtendContext(ctx)
			}
		}
	}()
	return func() { close(done) }
}

type row struct {
	id                        int64
	msgID, topic, tag         string
	content                   []byte
	retryCount, maxRetryCount int
	nextRetryTime             int64
}

// processBatch is batchProcessMessages: send each message, then write the results back.
func (r *Relay) processBatch(ctx context.Context, msgs []row, st *Stats) error {
	var successIDs []int64
	reasons := map[int64]string{}
	var retryIDs []int64
	for _, m := range msgs {
		msg := &relay.Message{ID: m.id, MsgID: m.msgID, Topic: m.topic, Tag: m.tag, Keys: []string{m.msgID},
			Body: m.content, RetryCount: m.retryCount, MaxRetries: m.maxRetryCount}
		if err := r.pub.Send(ctx, relay.Route{}, msg); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			retryIDs = append(retryIDs, m.id)
			reasons[m.id] = "处理异常: " + err.Error()
			continue
		}
		successIDs = append(successIDs, m.id)
	}
	if len(successIDs) > 0 {
		if err := r.updateSent(ctx, successIDs); err != nil {
			return err
		}
		st.Sent += len(successIDs)
	}
	if len(retryIDs) > 0 {
		if err := r.updateRetry(ctx, retryIDs, reasons); err != nil {
			return err
		}
		st.Retried += len(retryIDs)
	}
	return nil
}

// updateSent is updateBatchById with status 2: one UPDATE per row in one transaction.
func (r *Relay) updateSent(ctx context.Context, ids []int64) error {
	return r.inTx(ctx, func(tx *sql.Tx) error {
		for _, id := range ids {
			if _, err := tx.ExecContext(ctx, r.q.markSent, id); err != nil {
				return fmt.Errorf("classicrelay: mark row %d sent: %w", id, err)
			}
		}
		return nil
	})
}

// updateRetry is batchUpdateRetryMessages: listByIds, then one UPDATE per row in one
// transaction.
func (r *Relay) updateRetry(ctx context.Context, ids []int64, reasons map[int64]string) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := r.db.QueryContext(ctx, r.q.listByIDs(len(ids)), args...)
	if err != nil {
		return fmt.Errorf("classicrelay: list failed rows: %w", err)
	}
	type failed struct {
		id         int64
		retryCount int
	}
	var list []failed
	for rows.Next() {
		var f failed
		if err := rows.Scan(&f.id, &f.retryCount); err != nil {
			rows.Close()
			return fmt.Errorf("classicrelay: list failed rows: %w", err)
		}
		list = append(list, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("classicrelay: list failed rows: %w", err)
	}
	return r.inTx(ctx, func(tx *sql.Tx) error {
		for _, f := range list {
			n := f.retryCount + 1
			reason := reasons[f.id]
			if len(reason) > 1000 {
				reason = reason[:1000]
			}
			if _, err := tx.ExecContext(ctx, r.q.markRetry, n, nextRetryTime(time.Now(), n), reason, f.id); err != nil {
				return fmt.Errorf("classicrelay: mark row %d for retry: %w", f.id, err)
			}
		}
		return nil
	})
}

func (r *Relay) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("classicrelay: begin: %w", err)
	}
	if err := f(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("classicrelay: commit: %w", err)
	}
	return nil
}

// nextRetryTime is getNextRetryTime: now + min(2^retryCount s, 1 h), in epoch ms.
func nextRetryTime(now time.Time, retryCount int) int64 {
	interval := math.Min(math.Pow(2, float64(retryCount))*1000, float64(maxInterval.Milliseconds()))
	return now.UnixMilli() + int64(interval)
}
