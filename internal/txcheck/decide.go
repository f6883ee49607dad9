// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/mysqlerr"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Answer is a check-back's answer, as END_TRANSACTION's commitOrRollback writes it.
type Answer int

// The answers to a check-back.
const (
	// Unknown leaves the half to a later check (nothing is sent: the broker ignores it).
	Unknown Answer = 0
	// Commit makes the broker store the real message.
	Commit Answer = 8
	// Rollback makes the broker discard the half.
	Rollback Answer = 12
)

func (a Answer) String() string {
	switch a {
	case Commit:
		return "commit"
	case Rollback:
		return "rollback"
	}
	return "unknown"
}

// checkTimesProperty is the broker's count of checks of the half, this one included.
const checkTimesProperty = "TRANSACTION_CHECK_TIMES"

// The half's properties that name its row (outbox.TableProperty, outbox.WriterProperty).
const (
	tableProperty  = outbox.TableProperty
	writerProperty = outbox.WriterProperty
)

// Reasons label an answer in logs and metrics.
const (
	ReasonNoMsgID       = "no_msg_id"        // not a half of an outbox row: a misconfigured group
	ReasonUnknownTable  = "unknown_table"    // OUTBOX_TABLE names a table this relay does not serve
	ReasonOpen          = "open_transaction" // the writer's transaction still holds the row
	ReasonDatabase      = "database_error"   // the probe failed: ask again later
	ReasonRelayDelivers = "relay_delivers"   // the row is pending: the relay sends it, now
	ReasonSent          = "already_sent"     // status 2: a copy already reached the broker
	ReasonDead          = "dead_or_deleted"  // status 3 or is_deleted: the operator's call
	ReasonRolledBack    = "no_row"           // our writer's row is absent: its transaction rolled back
	ReasonSDKWait       = "no_row_sdk_wait"  // another writer's row is absent: wait a few checks
	ReasonFenced        = "no_row_fenced"    // ... then a tombstone row fences the msg_id
	ReasonUnknownStatus = "unknown_status"   // a status this version does not know
	ReasonHanded        = "handed_commit"    // status 4: the broker delivers; the writer's END never landed
	ReasonHandedNoRow   = "no_row_handed"    // a handed half's row is absent: left to the writer or the discard
	ReasonHandedYoung   = "handed_end_grace" // a handed row younger than the END grace: its writer's END may be on its way
)

// handedWriter is the OUTBOX_TX value of writers of handed rows (docs/sql-recipes.md).
const handedWriter = "h"

// Check is one check-back as the broker sent it.
type Check struct {
	// Group is the half's producer group (PGROUP).
	Group string
	// Topic is the half's real topic.
	Topic string
	// Properties are the half's properties.
	Properties map[string]string
	// Times is TRANSACTION_CHECK_TIMES: 1 for the first check.
	Times int
}

// decider answers checks from the outbox tables of one database.
type decider struct {
	db          *sql.DB
	tables      map[string]bool
	defTable    string
	timeout     time.Duration
	sdkPatience int
	endGrace    time.Duration
	now         func() time.Time
	release     func(ctx context.Context, table string)
}

// decide answers c by the decision table of docs/transactional.md.
func (d *decider) decide(ctx context.Context, c Check) (Answer, string) {
	id := c.Properties[outbox.MsgIDProperty]
	if id == "" {
		return Unknown, ReasonNoMsgID
	}
	table, ok := d.table(c.Properties)
	if !ok {
		return Unknown, ReasonUnknownTable
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	st, deleted, age, found, err := d.probe(ctx, table, id)
	switch {
	case err != nil && lockConflict(err):
		return Unknown, ReasonOpen
	case err != nil:
		return Unknown, ReasonDatabase
	case !found && c.Properties[writerProperty] == handedWriter:
		// Most likely rolled back, but a ROLLBACK is never needed here (the broker discards
		// the half after its last check, losing nothing) and would lose the message if this
		// relay serves another database than the writer's (a check group shared by mistake).
		return Unknown, ReasonHandedNoRow
	case !found && c.Properties[writerProperty] != "":
		return Rollback, ReasonRolledBack
	case !found:
		return d.fence(ctx, table, id, c)
	case deleted || st == int(outbox.StatusDead):
		return Rollback, ReasonDead
	case st == int(outbox.StatusSent):
		return Rollback, ReasonSent
	case st == int(outbox.StatusHanded) && age < d.endGrace:
		// Committed moments ago: its writer's END may still be on its way (a JVM paused, a
		// slow network), and a COMMIT now as well would store the message twice.
		return Unknown, ReasonHandedYoung
	case st == int(outbox.StatusHanded):
		// A handed row's only delivery is the broker's COMMIT (the relay never sends it):
		// committed and not yet answered, so its writer's END was lost. The responder marks
		// it sent once the broker acknowledges the COMMIT (markCommitted).
		return Commit, ReasonHanded
	case st == int(outbox.StatusPending) || st == int(outbox.StatusFailed):
		// The relay owns the row: the half is rolled back and the row sent now, so the
		// message goes out once, by the relay, whatever becomes of a late END.
		q := "UPDATE " + schema.QuoteIdent(table) + " SET next_retry_time = LEAST(next_retry_time, ?) WHERE msg_id = ? AND status IN (0,1)"
		if _, err := d.db.ExecContext(ctx, q, d.now().UnixMilli(), id); err != nil {
			return Unknown, ReasonDatabase
		}
		if d.release != nil {
			d.release(ctx, table)
		}
		return Rollback, ReasonRelayDelivers
	}
	return Unknown, ReasonUnknownStatus
}

// table returns the outbox table a half names (the default when it names none), and
// whether this relay serves it.
func (d *decider) table(props map[string]string) (string, bool) {
	table := props[tableProperty]
	if table == "" {
		table = d.defTable
	}
	return table, d.tables[table]
}

// markCommitted records that the broker acknowledged a check's COMMIT of a handed row: the
// row becomes sent, so that a later check of the same half (a broker that lost its
// "resolved" record) is answered ROLLBACK, not with a second copy.
func (d *decider) markCommitted(ctx context.Context, props map[string]string) error {
	table, ok := d.table(props)
	if !ok {
		return fmt.Errorf("txcheck: table %q not served", props[tableProperty])
	}
	q := "UPDATE " + schema.QuoteIdent(table) + " SET status = 2, sent_time = ?, next_retry_time = ? WHERE msg_id = ? AND status = 4"
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	now := d.now().UnixMilli() // a settled row's next_retry_time is when it was settled (purge, activity)
	if _, err := d.db.ExecContext(ctx, q, now, now, props[outbox.MsgIDProperty]); err != nil {
		return fmt.Errorf("txcheck: mark %s sent: %w", props[outbox.MsgIDProperty], err)
	}
	return nil
}

// probe reads the row with a locking read that does not wait: a writer's transaction
// that inserted the row and has not ended holds its lock, which is how an open
// transaction is told from a rolled-back one. age is the time since the row's insert, by
// the database's clock (whole seconds).
func (d *decider) probe(ctx context.Context, table, id string) (status int, deleted bool, age time.Duration, found bool, err error) {
	// An adopted table's NULLs: a NULL status is unknown (-1: never decided), a NULL
	// is_deleted not deleted (schema.NotDeletedSQL).
	q := "SELECT COALESCE(status, -1), NOT " + schema.NotDeletedSQL + ", COALESCE(TIMESTAMPDIFF(SECOND, create_time, NOW()), 0) FROM " +
		schema.QuoteIdent(table) + " WHERE msg_id = ? FOR UPDATE NOWAIT"
	var secs int64
	err = d.db.QueryRowContext(ctx, q, id).Scan(&status, &deleted, &secs)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, 0, false, nil
	}
	if err != nil {
		return 0, false, 0, false, err
	}
	return status, deleted, time.Duration(secs) * time.Second, true, nil
}

// lockConflict reports NOWAIT's refusal: 1205 on MariaDB, 3572 (ER_LOCK_NOWAIT) on MySQL 8.
func lockConflict(err error) bool {
	n := mysqlerr.Number(err)
	return n == mysqlerr.LockWaitTimeout || n == 3572
}

// fence settles a half whose row is absent and that our writer did not send (an SDK
// writer answering its own checks, or none): UNKNOWN for the first sdkPatience checks,
// then a tombstone row (dead and deleted, so never sent) takes the msg_id. If the
// tombstone is inserted, the writer's own insert can never commit, so ROLLBACK is safe;
// if the msg_id exists by then, the row is read again.
func (d *decider) fence(ctx context.Context, table, id string, c Check) (Answer, string) {
	if c.Times < d.sdkPatience {
		return Unknown, ReasonSDKWait
	}
	q := "INSERT IGNORE INTO " + schema.QuoteIdent(table) +
		" (msg_id, topic, tag, content, status, is_deleted, fail_reason) VALUES (?, ?, '', '', 3, 1, ?)"
	res, err := d.db.ExecContext(ctx, q, id, c.Topic, "fenced by a transactional check after "+strconv.Itoa(c.Times)+" checks")
	if err != nil {
		if lockConflict(err) {
			return Unknown, ReasonOpen
		}
		return Unknown, ReasonDatabase
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return Rollback, ReasonFenced
	}
	return Unknown, ReasonOpen // the msg_id appeared meanwhile: the next check reads it
}
