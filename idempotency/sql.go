// SPDX-License-Identifier: Apache-2.0

package idempotency

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
	"github.com/outbox-relay/outbox-relay/schema"
)

// MaxSQLKeyLen is the longest key, in bytes, the dedupe table holds (its dedupe_key column).
const MaxSQLKeyLen = 255

// maxSQLGroupLen is the size of the consumer_group column.
const maxSQLGroupLen = 128

// Beginner starts transactions: *sql.DB and *sql.Conn satisfy it, and so do wrappers of
// them that keep the method.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Execer runs a statement: *sql.DB, *sql.Conn and *sql.Tx satisfy it.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQLConfig configures a SQLGuard.
type SQLConfig struct {
	// Group names the consumer group the keys belong to (the consumer_group column), so that
	// two consumer groups applying the same order in one database each apply it once.
	// Required; at most 128 bytes.
	Group string
	// Table is the dedupe table, created with schema.DedupeDDL or CreateTable: letters,
	// digits and underscores, not starting with a digit, at most 64 characters.
	// Defaults to schema.DedupeDefaultTable ("outbox_dedupe").
	Table string
	// TxOptions are the options of the transaction Do opens. Defaults to nil: the
	// server's default isolation level (REPEATABLE READ on MySQL and MariaDB).
	TxOptions *sql.TxOptions
}

func (c *SQLConfig) setDefaults() {
	if c.Table == "" {
		c.Table = schema.DedupeDefaultTable
	}
}

func (c *SQLConfig) validate() error {
	switch {
	case c.Group == "":
		return errors.New("idempotency: SQLConfig.Group is required")
	case len(c.Group) > maxSQLGroupLen:
		return fmt.Errorf("idempotency: SQLConfig.Group must be at most %d bytes, got %d", maxSQLGroupLen, len(c.Group))
	}
	if err := schema.ValidateIdent(c.Table); err != nil {
		return fmt.Errorf("idempotency: SQLConfig.Table: %w", err)
	}
	return nil
}

// SQLGuard applies a message's effect exactly once by inserting a dedupe row in the same
// transaction as the effect, in the consumer's own database: the effect and the record
// that it happened commit or roll back together, so neither a crash nor a lost Redis can
// make it run twice. Rows are kept until Purge removes them. It is safe for concurrent use.
type SQLGuard struct {
	cfg         SQLConfig
	insertSQL   string
	insertFPSQL string
	readFPSQL   string
	purgeSQL    string
	noFPColumn  atomic.Bool // the table lacks the fingerprint column (a table of an earlier version)
}

// Group returns the consumer group of the guard's keys (SQLConfig.Group).
func (g *SQLGuard) Group() string { return g.cfg.Group }

// NewSQLGuard returns a SQLGuard. Zero fields of cfg take their documented defaults; an
// invalid field is reported by name. It does not touch the database: create the table with
// a migration of schema.DedupeDDL, or with CreateTable.
func NewSQLGuard(cfg SQLConfig) (*SQLGuard, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &SQLGuard{
		cfg:         cfg,
		insertSQL:   "INSERT INTO " + schema.QuoteIdent(cfg.Table) + " (consumer_group, dedupe_key) VALUES (?, ?)",
		insertFPSQL: "INSERT INTO " + schema.QuoteIdent(cfg.Table) + " (consumer_group, dedupe_key, fingerprint) VALUES (?, ?, ?)",
		readFPSQL:   "SELECT fingerprint FROM " + schema.QuoteIdent(cfg.Table) + " WHERE consumer_group = ? AND dedupe_key = ?",
		purgeSQL:    "DELETE FROM " + schema.QuoteIdent(cfg.Table) + " WHERE consumer_group = ? AND created_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?",
	}, nil
}

// CreateTable creates the dedupe table if it does not exist (schema.DedupeDDL).
func (g *SQLGuard) CreateTable(ctx context.Context, db Execer) error {
	ddl, err := schema.DedupeDDL(g.cfg.Table)
	if err != nil {
		return fmt.Errorf("idempotency: dedupe table DDL: %w", err)
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return fmt.Errorf("idempotency: create dedupe table %s: %w", g.cfg.Table, err)
	}
	return nil
}

// Do runs fn in a transaction on db together with the insert of key's dedupe row.
//
// The row is inserted first. If it is already there, the transaction is rolled back and Do
// returns Duplicate without calling fn. If another transaction has inserted it and is still
// open, the insert waits for that transaction's row lock: Duplicate when it commits, the
// effect is applied here when it rolls back. Otherwise fn runs with the transaction, and
// when it returns nil the transaction commits: Applied.
//
// When fn fails, the insert fails (lock wait timeout or deadlock included) or the commit
// fails, everything is rolled back and Do returns Failed with the error: redeliver. Even a
// commit whose result is unknown (connection lost) is safe to redeliver: the redelivery
// finds the row (Duplicate) or applies the effect. fn must do all its writes through tx
// and must not commit or roll it back. InProgress is never returned: a concurrent duplicate
// waits instead. An empty key gives ErrNoKey, a key longer than MaxSQLKeyLen bytes
// ErrInvalidKey. The error is nil exactly when the message must not be redelivered.
func (g *SQLGuard) Do(ctx context.Context, db Beginner, key string, fn func(ctx context.Context, tx *sql.Tx) error) (Result, error) {
	return g.DoWithFingerprint(ctx, db, key, "", fn)
}

// DoWithFingerprint is Do that also stores fingerprint (a digest of the message's body) in the
// dedupe row, and on a Duplicate returns the first delivery's in Result.FirstFingerprint, so
// that a distinct event sharing the key can be told from a redelivery and reported. A table
// without the fingerprint column (one of an earlier version: `outbox-relay migrate
// --dedupe-table` adds it online) keeps none, and FirstFingerprint stays empty.
func (g *SQLGuard) DoWithFingerprint(ctx context.Context, db Beginner, key, fingerprint string, fn func(ctx context.Context, tx *sql.Tx) error) (Result, error) {
	if err := checkSQLKey(key); err != nil {
		return Result{Outcome: Failed}, err
	}
	tx, err := db.BeginTx(ctx, g.cfg.TxOptions)
	if err != nil {
		return Result{Outcome: Failed}, fmt.Errorf("idempotency: begin transaction for %q: %w", key, err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback() // also on a duplicate, a failure and a panic in fn
		}
	}()
	res, err := g.DoTxWithFingerprint(ctx, tx, key, fingerprint, func(ctx context.Context) error { return fn(ctx, tx) })
	if err != nil || res.Outcome != Applied {
		return res, err
	}
	committed = true // a failed Commit has rolled back already
	if err := tx.Commit(); err != nil {
		return Result{Outcome: Failed}, fmt.Errorf("idempotency: commit %q: %w", key, err)
	}
	return res, nil
}

// DoTx is Do inside the caller's transaction: it inserts key's dedupe row through tx, then
// runs fn, so that the dedupe row, the effect and whatever else the caller writes in tx
// commit together. The caller commits; Applied means "applied in tx", final once tx
// commits.
//
// Duplicate (nil error) means the key was consumed before: fn was not called, and the
// failed insert left tx usable with nothing written by DoTx; commit or roll back as the
// other writes require. On a non-nil error (fn failed, or the insert failed) the caller
// must roll tx back, since the dedupe row or part of fn's writes may be in it; committing
// anyway would record the message as consumed without its effect. Keys are checked as in
// Do.
func (g *SQLGuard) DoTx(ctx context.Context, tx *sql.Tx, key string, fn func(ctx context.Context) error) (Result, error) {
	return g.DoTxWithFingerprint(ctx, tx, key, "", fn)
}

// DoTxWithFingerprint is DoTx that keeps fingerprint as DoWithFingerprint does.
func (g *SQLGuard) DoTxWithFingerprint(ctx context.Context, tx *sql.Tx, key, fingerprint string, fn func(ctx context.Context) error) (Result, error) {
	if err := checkSQLKey(key); err != nil {
		return Result{Outcome: Failed}, err
	}
	if err := g.insert(ctx, tx, key, fingerprint); err != nil {
		if mysqlerr.Number(err) == mysqlerr.DuplicateEntry {
			return Result{Outcome: Duplicate, FirstFingerprint: g.firstFingerprint(ctx, tx, key, fingerprint)}, nil
		}
		return Result{Outcome: Failed}, fmt.Errorf("idempotency: insert dedupe row for %q: %w", key, err)
	}
	if err := fn(ctx); err != nil {
		return Result{Outcome: Failed}, fmt.Errorf("idempotency: handler for %q: %w", key, err)
	}
	return Result{Outcome: Applied}, nil
}

// insert writes key's dedupe row, with fingerprint when one is given and the table has the
// column. A table without it (error 1054, which leaves tx usable) is remembered and the row
// written without.
func (g *SQLGuard) insert(ctx context.Context, tx *sql.Tx, key, fingerprint string) error {
	if fingerprint != "" && !g.noFPColumn.Load() {
		_, err := tx.ExecContext(ctx, g.insertFPSQL, g.cfg.Group, key, fingerprint)
		if mysqlerr.Number(err) != mysqlerr.UnknownColumn {
			return err
		}
		g.noFPColumn.Store(true)
	}
	_, err := tx.ExecContext(ctx, g.insertSQL, g.cfg.Group, key)
	return err
}

// firstFingerprint reads the fingerprint kept with key's row, "" when none was kept or it
// cannot be read: a hint for logs, never a decision.
func (g *SQLGuard) firstFingerprint(ctx context.Context, tx *sql.Tx, key, fingerprint string) string {
	if fingerprint == "" || g.noFPColumn.Load() {
		return ""
	}
	var fp sql.NullString
	_ = tx.QueryRowContext(ctx, g.readFPSQL, g.cfg.Group, key).Scan(&fp) // best effort
	return fp.String
}

func checkSQLKey(key string) error {
	if key == "" {
		return ErrNoKey
	}
	if len(key) > MaxSQLKeyLen {
		return fmt.Errorf("%w: key of %d bytes, the dedupe table holds %d", ErrInvalidKey, len(key), MaxSQLKeyLen)
	}
	return nil
}

// Purge deletes up to limit dedupe rows of the guard's group older than olderThan, and
// returns how many it deleted. Call it in a loop until it returns less than limit. A
// duplicate arriving after its row is purged is applied again, so keep rows well beyond
// the longest redelivery or replay window (days, not hours).
func (g *SQLGuard) Purge(ctx context.Context, db Execer, olderThan time.Duration, limit int) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("idempotency: Purge: limit must be positive, got %d", limit)
	}
	res, err := db.ExecContext(ctx, g.purgeSQL, g.cfg.Group, olderThan.Microseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("idempotency: purge %s: %w", g.cfg.Table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("idempotency: purge %s: rows affected: %w", g.cfg.Table, err)
	}
	return n, nil
}

// IsRetryable reports whether err is a lock wait timeout or a deadlock reported by MySQL or
// MariaDB: transient conflicts that a redelivery resolves.
func IsRetryable(err error) bool { return mysqlerr.Retryable(err) }
