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
	ReasonHandedYoung   = "handed_end_grace" // a handed row committed less than the END grace ago: its writer's END may be on its way
	ReasonForged        = "unauthenticated"  // the half carries no valid OUTBOX_SIG: its row is not touched
	ReasonMismatch      = "half_mismatch"    // an authenticated half whose topic or keys are not its row's
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
	fence       bool
	secrets     []string
	endGrace    time.Duration
	now         func() time.Time
	release     func(ctx context.Context, table string)
}

// decide answers c by the decision table of docs/transactional.md. Nothing is done to a
// row, and nothing but UNKNOWN answered, unless the half is authenticated (its OUTBOX_SIG
// signs its msg_id, table and topic under a shared secret) and its topic and keys are
// the row's.
func (d *decider) decide(ctx context.Context, c Check) (Answer, string) {
	table, reason := d.authenticate(c)
	if reason != "" {
		return Unknown, reason
	}
	id := c.Properties[outbox.MsgIDProperty]
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	r, found, err := d.probe(ctx, table, id)
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
		return d.fenceAbsent(ctx, table, id, c)
	case !r.matches(id, c):
		return Unknown, ReasonMismatch
	case r.deleted || r.status == int(outbox.StatusDead):
		return Rollback, ReasonDead
	case r.status == int(outbox.StatusSent):
		return Rollback, ReasonSent
	case r.status == int(outbox.StatusHanded):
		return d.handed(ctx, table, id, r)
	case r.status == int(outbox.StatusPending) || r.status == int(outbox.StatusFailed):
		// The relay owns the row: the half is rolled back and the row sent now, so the
		// message goes out once, by the relay, whatever becomes of a late END.
		q := "UPDATE " + schema.QuoteIdent(table) + " SET next_retry_time = LEAST(next_retry_time, ?) WHERE msg_id = ? AND status IN (0,1)"
		if _, err := d.db.ExecContext(ctx, q, r.nowMs, id); err != nil {
			return Unknown, ReasonDatabase
		}
		if d.release != nil {
			d.release(ctx, table)
		}
		return Rollback, ReasonRelayDelivers
	}
	return Unknown, ReasonUnknownStatus
}

// authenticate returns the table of the row c's half names, or the reason it is not acted
// on: no msg_id, a table this relay does not serve, or no valid signature. It reads nothing
// but the half, so the responder runs it before queueing a check.
func (d *decider) authenticate(c Check) (table, reason string) {
	id := c.Properties[outbox.MsgIDProperty]
	if id == "" {
		return "", ReasonNoMsgID
	}
	table, ok := d.table(c.Properties)
	if !ok {
		return "", ReasonUnknownTable
	}
	if !outbox.VerifyHalf(d.secrets, c.Properties[outbox.SignatureProperty], table, id, c.Topic) {
		return "", ReasonForged
	}
	return table, ""
}

// handed answers the check of a committed handed row. A handed row's only delivery is the
// broker's COMMIT (the relay never sends it), but its writer's own END may still be on its
// way (a JVM paused, a slow network), and a COMMIT as well would store the message twice.
// So the END grace counts from the commit: the first check that finds the row committed
// stamps sent_time with the database's clock (epoch ms, whatever the session's time zone)
// and answers UNKNOWN; a check at least the grace later answers COMMIT. The responder marks
// the row sent once the broker acknowledges the COMMIT (markCommitted).
func (d *decider) handed(ctx context.Context, table, id string, r row) (Answer, string) {
	if d.endGrace <= 0 {
		return Commit, ReasonHanded
	}
	if r.seenMs == 0 {
		q := "UPDATE " + schema.QuoteIdent(table) + " SET sent_time = ? WHERE msg_id = ? AND status = 4 AND sent_time = 0"
		if _, err := d.db.ExecContext(ctx, q, r.nowMs, id); err != nil {
			return Unknown, ReasonDatabase
		}
		return Unknown, ReasonHandedYoung
	}
	if r.nowMs-r.seenMs < d.endGrace.Milliseconds() {
		return Unknown, ReasonHandedYoung
	}
	return Commit, ReasonHanded
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

// row is what probe reads of an outbox row.
type row struct {
	status  int
	deleted bool
	topic   string
	keys    string
	// seenMs is sent_time: for a handed row, when a check first found it committed
	// (database clock, epoch ms), 0 before.
	seenMs int64
	// nowMs is the database's clock at the probe, epoch ms.
	nowMs int64
}

// matches reports whether the half of check c is the row's: same topic, and the half's
// KEYS the row's msg_keys (the msg_id when the row has none), as the writers send them.
func (r row) matches(id string, c Check) bool {
	keys := r.keys
	if keys == "" {
		keys = id
	}
	return r.topic == c.Topic && c.Properties["KEYS"] == keys
}

// probe reads the row with a locking read that does not wait: a writer's transaction
// that inserted the row and has not ended holds its lock, which is how an open
// transaction is told from a rolled-back one. An adopted table's NULLs: a NULL status is
// unknown (-1: never decided), a NULL is_deleted not deleted (schema.NotDeletedSQL).
func (d *decider) probe(ctx context.Context, table, id string) (r row, found bool, err error) {
	q := "SELECT COALESCE(status, -1), NOT " + schema.NotDeletedSQL + ", COALESCE(topic, ''), COALESCE(msg_keys, ''), COALESCE(sent_time, 0), " +
		"CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) FROM " + schema.QuoteIdent(table) + " WHERE msg_id = ? FOR UPDATE NOWAIT"
	var del int
	err = d.db.QueryRowContext(ctx, q, id).Scan(&r.status, &del, &r.topic, &r.keys, &r.seenMs, &r.nowMs)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	r.deleted = del != 0
	return r, true, nil
}

// lockConflict reports NOWAIT's refusal: 1205 on MariaDB, 3572 (ER_LOCK_NOWAIT) on MySQL 8.
func lockConflict(err error) bool {
	n := mysqlerr.Number(err)
	return n == mysqlerr.LockWaitTimeout || n == 3572
}

// fenceAbsent settles an authenticated half whose row is absent and that names no writer
// of ours (an SDK writer answering its own checks, or none): UNKNOWN, unless fencing is
// on (it is opt-in); then UNKNOWN for the first sdkPatience checks, and then a tombstone
// row (dead and deleted, so never sent) takes the msg_id. The check count is the one the
// half carries, which its sender can preset: only an authenticated half gets this far. If the
// tombstone is inserted, the writer's own insert can never commit, so ROLLBACK is safe;
// if the msg_id exists by then, the row is read again.
func (d *decider) fenceAbsent(ctx context.Context, table, id string, c Check) (Answer, string) {
	if !d.fence || c.Times < d.sdkPatience {
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
