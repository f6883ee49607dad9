// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
)

// onlineClause lets writes continue while InnoDB alters the table; the server refuses a
// statement carrying it rather than block.
const onlineClause = "ALGORITHM=INPLACE, LOCK=NONE"

// Server errors of a statement whose ALGORITHM or LOCK clause the server cannot honour:
// ER_ALTER_OPERATION_NOT_SUPPORTED and ER_ALTER_OPERATION_NOT_SUPPORTED_REASON.
const (
	errAlterNotSupported       = 1845
	errAlterNotSupportedReason = 1846
)

// Step is one DDL statement of a migration.
type Step struct {
	// SQL is the statement, without a trailing semicolon.
	SQL string
	// Alter is the statement's ALTER clauses alone, without the table name and the
	// ALGORITHM/LOCK clause: the --alter argument of gh-ost and pt-online-schema-change.
	// Empty for a CREATE TABLE.
	Alter string
	// Online reports whether the application keeps writing while the step runs: a new
	// table, or an ALTER with ALGORITHM=INPLACE, LOCK=NONE.
	Online bool
	// Blocking says, for a step that is not online, what it blocks and why.
	Blocking string
	// Backfill marks an UPDATE that gives NULLs their column's default (see nullSteps).
	// Apply runs it in primary key ranges of backfillChunk ids, each its own short
	// transaction in READ COMMITTED; its SQL, run by hand, does the whole table at once.
	Backfill bool
	// Instant marks an ALTER with ALGORITHM=INSTANT: a server that cannot run it instantly
	// runs it with ALGORITHM=INPLACE, LOCK=NONE instead.
	Instant bool
	// Note says, for a person reading the plan, what the step is for and what it costs
	// when that is not plain from its SQL (a table rebuilt, positions copied); may be empty.
	Note string
}

// Plan returns the statements that bring table to the contract, in order, without running
// them: nothing when the table is up to date, a CREATE TABLE when it is missing, else one
// online ALTER adding the missing columns and indexes and dropping the obsolete ones (the
// table is rebuilt at most once), the CREATE TABLE of its stored-position journal when that
// is missing (StoredLogDDL; with the outbox table's own when both are) and, when
// id is not AUTO_INCREMENT, one blocking ALTER: changing a column's definition copies the
// table on MySQL and MariaDB, and writes wait for the copy. A column of an incompatible
// type is an error; it is never altered.
func Plan(ctx context.Context, db *sql.DB, table string) ([]Step, error) {
	return PlanPartitioned(ctx, db, table, 1)
}

// PlanPartitioned is Plan for a table split into partitions partitions (relay.partitions):
// after Plan's steps come the online ALTERs that add PartitionColumn and its index, or
// replace them when the table has another number of partitions, or drop them for 1.
func PlanPartitioned(ctx context.Context, db *sql.DB, table string, partitions int) ([]Step, error) {
	problems, st, err := check(ctx, db, table, partitions)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 && problems[0].Kind == "missing table" {
		ddl, _ := DDL(table)
		steps := []Step{{SQL: strings.TrimSpace(ddl), Online: true}, storedLogStep(table)}
		return append(steps, partitionSteps(table, partitions, st)...), nil
	}
	r := sortRepairs(problems)
	if len(r.wrong) > 0 {
		return nil, fmt.Errorf("table %s cannot be upgraded automatically: %s", table, strings.Join(r.wrong, "; "))
	}
	steps := r.onlineSteps(table)
	var found map[string]columnInfo // for the definitions and comments, which MODIFY replaces
	if r.autoInc || len(r.widen) > 0 || len(r.nullable) > 0 {
		if found, err = readColumns(ctx, db, table); err != nil {
			return nil, err
		}
	}
	if len(r.nullable) > 0 {
		steps = append(steps, nullSteps(table, r.nullable, found)...)
	}
	if r.autoInc || len(r.widen) > 0 {
		steps = append(steps, copyStep(table, r.autoInc, r.widen, found))
	}
	return append(steps, partitionSteps(table, partitions, st)...), nil
}

// repairs sorts a table's problems by the kind of statement that repairs them.
type repairs struct {
	online   []string // clauses of the one online ALTER
	wrong    []string // problems no statement may repair
	widen    []string // columns to widen by copying the table
	nullable []string // columns to make NOT NULL
	journal  bool     // the stored-position journal is missing
	autoInc  bool     // id must become AUTO_INCREMENT, by copying the table
}

// sortRepairs decides which statement repairs each problem; the partition column and
// index are left to partitionSteps.
func sortRepairs(problems []Problem) repairs {
	var r repairs
	for _, p := range problems {
		if p.Object == PartitionColumn || p.Object == partitionIndex.name {
			continue // partitionSteps
		}
		switch p.Kind {
		case "missing column":
			r.online = append(r.online, fmt.Sprintf("ADD COLUMN %s %s", QuoteIdent(p.Object), p.Want))
		case "not auto_increment":
			r.autoInc = true
		case "narrow column":
			r.widen = append(r.widen, p.Object)
		case "nullable column":
			r.nullable = append(r.nullable, p.Object)
		case MissingStoredLog:
			if p.Got != "" {
				r.wrong = append(r.wrong, p.String())
			}
			r.journal = true
		case "obsolete index":
			r.online = append(r.online, "DROP INDEX "+QuoteIdent(p.Object))
		case "missing index":
			r.online = append(r.online, addIndexClause(p.Object))
		default:
			r.wrong = append(r.wrong, p.String())
		}
	}
	return r
}

// addIndexClause is the ALTER clause that creates the wanted index named name.
func addIndexClause(name string) string {
	ix := indexByName(name)
	kind := "INDEX"
	if ix.unique {
		kind = "UNIQUE INDEX"
	}
	cols := make([]string, len(ix.columns))
	for i, c := range ix.columns {
		cols[i] = QuoteIdent(c)
	}
	return fmt.Sprintf("ADD %s %s (%s)", kind, QuoteIdent(ix.name), strings.Join(cols, ", "))
}

// onlineSteps are the steps that leave writes running: the one online ALTER, then the
// journal's CREATE TABLE.
func (r repairs) onlineSteps(table string) []Step {
	var steps []Step
	if len(r.online) > 0 {
		alter := strings.Join(r.online, ", ")
		steps = append(steps, Step{
			SQL:   fmt.Sprintf("ALTER TABLE %s %s, %s", QuoteIdent(table), alter, onlineClause),
			Alter: alter, Online: true,
		})
	}
	if r.journal {
		steps = append(steps, storedLogStep(table))
	}
	return steps
}

// copyStep is the one blocking ALTER that changes column definitions: making id
// AUTO_INCREMENT and widening the widen columns, keeping each column's comment (found).
func copyStep(table string, autoInc bool, widen []string, found map[string]columnInfo) Step {
	var mods, what []string
	if autoInc {
		sign := "" // MODIFY replaces the whole definition: keep an unsigned id unsigned
		if strings.Contains(strings.ToLower(found["id"].columnType), "unsigned") {
			sign = " unsigned"
		}
		mods = append(mods, "MODIFY COLUMN `id` bigint"+sign+" NOT NULL AUTO_INCREMENT"+commentClause(found["id"].comment))
		what = append(what, "making id AUTO_INCREMENT")
	}
	if len(widen) > 0 {
		for _, name := range widen {
			mods = append(mods, fmt.Sprintf("MODIFY COLUMN %s %s%s", QuoteIdent(name), columnByName(name).def, commentClause(found[name].comment)))
		}
		what = append(what, "widening "+strings.Join(widen, ", "))
	}
	alter := strings.Join(mods, ", ")
	return Step{
		SQL:   fmt.Sprintf("ALTER TABLE %s %s, ALGORITHM=COPY, LOCK=SHARED", QuoteIdent(table), alter),
		Alter: alter,
		Blocking: strings.Join(what, " and ") + " changes column definitions, which InnoDB does by copying the table: " +
			"reads continue, writes wait until the copy ends (minutes on a large table)",
	}
}

// DedupePlan returns the CREATE TABLE of the consumer dedupe table named table (see
// DedupeDDL); for a table of that name that exists, the online ADD COLUMN of its nullable
// fingerprint column when it lacks it, or nothing.
func DedupePlan(ctx context.Context, db *sql.DB, table string) ([]Step, error) {
	ddl, err := DedupeDDL(table)
	if err != nil {
		return nil, err
	}
	cols, err := readColumns(ctx, db, table)
	if err != nil {
		return nil, err
	}
	if len(cols) > 0 {
		if _, ok := cols["fingerprint"]; ok {
			return nil, nil
		}
		alter := "ADD COLUMN `fingerprint` varbinary(64) NULL COMMENT 'digest of the first delivery''s body; NULL when the writer kept none'"
		return []Step{{SQL: "ALTER TABLE " + QuoteIdent(table) + " " + alter + ", " + onlineClause, Alter: alter, Online: true}}, nil
	}
	if err := columnsHidden(ctx, db, table); err != nil {
		return nil, err
	}
	return []Step{{SQL: strings.TrimSpace(ddl), Online: true}}, nil
}

// ErrNotOnline is returned by Apply for a step that would block the application's writes
// on a table that has rows, unless blocking is allowed.
var ErrNotOnline = errors.New("step cannot run online")

// Apply runs steps in order on table. A step that is not online, or an online step the
// server cannot run online (older servers, some column types), blocks the application's
// writes: with allowBlocking false it is not run on a table that has rows, and the error
// wraps ErrNotOnline; with allowBlocking true it runs, the refused online step without its
// ALGORITHM/LOCK clause.
func Apply(ctx context.Context, db *sql.DB, table string, steps []Step, allowBlocking bool) error {
	for _, st := range steps {
		if !st.Online && !allowBlocking {
			rows, err := hasRows(ctx, db, table)
			if err != nil {
				return err
			}
			if rows {
				return fmt.Errorf("table %s: %w: %s", table, ErrNotOnline, st.Blocking)
			}
		}
		if st.Backfill {
			if err := backfill(ctx, db, table, st.SQL); err != nil {
				return fmt.Errorf("migrate table %s: %w", table, err)
			}
			continue
		}
		err := execDDL(ctx, db, st.SQL, st.Online)
		if n := mysqlerr.Number(err); st.Instant && (n == errAlterNotSupported || n == errAlterNotSupportedReason) {
			err = execDDL(ctx, db, fmt.Sprintf("ALTER TABLE %s %s, %s", QuoteIdent(table), st.Alter, onlineClause), true)
		}
		if n := mysqlerr.Number(err); st.Online && (n == errAlterNotSupported || n == errAlterNotSupportedReason) {
			if !allowBlocking {
				return fmt.Errorf("table %s: %w on this server (%v)", table, ErrNotOnline, err)
			}
			_, err = db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s %s", QuoteIdent(table), st.Alter))
		}
		if err != nil {
			return fmt.Errorf("migrate table %s: %w", table, err)
		}
	}
	return nil
}

// ddlLockWait bounds how long an online step waits for the table's metadata lock at a time.
// An ALTER needs that lock, exclusively, for a moment at its start and at its end, and waits
// for it behind every open transaction that touched the table; while it waits, every new
// statement on the table queues behind it: one application transaction left open would
// stop all writers for as long as the ALTER waits (lock_wait_timeout, a year by default).
// Bounded, the step gives up after ddlLockWait and tries again after a pause that grows to
// ddlLockPauseMax, during which the writers go on; it gives up for good after
// ddlLockAttempts.
const (
	ddlLockWait     = 1 // second
	ddlLockPauseMax = 5 * time.Second
	ddlLockAttempts = 60
)

// execDDL runs one DDL statement; an online one on a connection of its own whose metadata
// lock waits are bounded by ddlLockWait, tried again while the lock is not granted.
func execDDL(ctx context.Context, db *sql.DB, stmt string, online bool) error {
	if !online {
		_, err := db.ExecContext(ctx, stmt)
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET SESSION lock_wait_timeout = %d", ddlLockWait)); err != nil {
		return fmt.Errorf("bound the metadata lock wait: %w", err)
	}
	for attempt := 1; ; attempt++ {
		_, err = conn.ExecContext(ctx, stmt)
		if mysqlerr.Number(err) != mysqlerr.LockWaitTimeout {
			return err
		}
		if attempt == ddlLockAttempts {
			return fmt.Errorf("a transaction kept the table open through %d attempts of %d s (see information_schema.innodb_trx): %w", attempt, ddlLockWait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(time.Duration(attempt)*time.Second, ddlLockPauseMax)):
		}
	}
}

// backfillChunk is the ids one statement of a backfill covers.
const backfillChunk = 5000

// backfill runs the UPDATE stmt, whose WHERE clause is its last, over table's primary key
// in ranges of backfillChunk ids, each autocommitted on a connection in READ COMMITTED: it
// locks only the rows it changes, briefly, and never the gaps writers insert into.
func backfill(ctx context.Context, db *sql.DB, table, stmt string) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		return fmt.Errorf("backfill in READ COMMITTED: %w", err)
	}
	var lo, hi sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT MIN(id), MAX(id) FROM "+QuoteIdent(table)).Scan(&lo, &hi); err != nil {
		return fmt.Errorf("id range for the backfill: %w", err)
	}
	for start := lo.Int64; lo.Valid; start += backfillChunk {
		end := int64(math.MaxInt64)
		if start <= math.MaxInt64-backfillChunk {
			end = start + backfillChunk - 1
		}
		if _, err := conn.ExecContext(ctx, stmt+" AND id BETWEEN ? AND ?", start, end); err != nil {
			return fmt.Errorf("backfill NULLs (ids %d to %d): %w", start, end, err)
		}
		if end >= hi.Int64 {
			return nil
		}
	}
	return nil
}

func hasRows(ctx context.Context, db *sql.DB, table string) (bool, error) {
	var one int
	err := db.QueryRowContext(ctx, "SELECT 1 FROM "+QuoteIdent(table)+" LIMIT 1").Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look for rows in %s: %w", table, err)
	}
	return true, nil
}

// columnByName returns the contract's column name.
func columnByName(name string) column {
	for _, c := range columns {
		if c.name == name {
			return c
		}
	}
	panic("schema: unknown column " + name)
}

// commentClause keeps a column's comment through a MODIFY, which would drop it.
func commentClause(comment string) string {
	if comment == "" {
		return ""
	}
	return " COMMENT '" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(comment) + "'"
}
