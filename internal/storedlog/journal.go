// SPDX-License-Identifier: Apache-2.0

package storedlog

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/schema"
)

// Entry is one journal row: where the broker stored the rows one write-back marked sent.
type Entry struct {
	// Seq is the entry's place in the journal (set when read).
	Seq int64
	// SettledMs is the write-back's time, epoch ms of the database clock: the rows'
	// next_retry_time as that write-back left them, which tells that send from a later one.
	SettledMs int64
	// Positions are the rows' positions (nil when Err is set).
	Positions []Pos
	// AuditedMs is when the audit finished the entry (set when read); 0: not yet.
	AuditedMs int64
	// Err is set on a read entry whose positions Decode refused (wrapping ErrCorrupt).
	Err error
}

// Cursor is a keyset position in the journal's audit order (settled_time, seq).
type Cursor struct{ SettledMs, Seq int64 }

// Journal is the stored-position journal of one outbox table (schema.StoredLogTable).
type Journal struct {
	db    *sql.DB
	table string // quoted
	name  string // plain, for messages
}

// maxAppendBytes bounds the positions one INSERT carries, well under the servers' default
// max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8).
const maxAppendBytes = 4 << 20

// Open returns the journal of the outbox table table on db.
func Open(db *sql.DB, table string) (*Journal, error) {
	if err := schema.ValidateIdent(table); err != nil {
		return nil, err
	}
	name := schema.StoredLogTable(table)
	return &Journal{db: db, table: schema.QuoteIdent(name), name: name}, nil
}

// Name is the journal table's name.
func (j *Journal) Name() string { return j.name }

// Append writes entries (Seq, AuditedMs and Err ignored) with as few INSERTs as their size
// allows: one for a few pages' worth.
func (j *Journal) Append(ctx context.Context, entries []Entry) error {
	var vals []string
	var args []any
	size := 0
	flush := func() error {
		if len(vals) == 0 {
			return nil
		}
		_, err := j.db.ExecContext(ctx, `INSERT INTO `+j.table+` (settled_time, first_id, last_id, row_count, positions) VALUES `+
			strings.Join(vals, ", "), args...)
		vals, args, size = vals[:0], args[:0], 0
		if err != nil {
			return fmt.Errorf("append to %s: %w", j.name, err)
		}
		return nil
	}
	for _, e := range entries {
		b, err := Encode(e.Positions)
		if err != nil {
			return fmt.Errorf("append to %s: %w", j.name, err)
		}
		if size+len(b) > maxAppendBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		first, last := idRange(e.Positions)
		vals = append(vals, "(?, ?, ?, ?, ?)")
		args = append(args, e.SettledMs, first, last, len(e.Positions), b)
		size += len(b)
	}
	return flush()
}

func idRange(ps []Pos) (first, last int64) {
	first, last = ps[0].ID, ps[0].ID
	for _, p := range ps[1:] {
		first, last = min(first, p.ID), max(last, p.ID)
	}
	return first, last
}

// Window returns up to limit entries settled in [fromMs, toMs] after cur, in (settled_time,
// seq) order, not yet audited unless all. An entry whose positions do not decode is
// returned with Err set, so that the caller can count and pass it.
func (j *Journal) Window(ctx context.Context, fromMs, toMs int64, cur Cursor, all bool, limit int) ([]Entry, error) {
	from := max(fromMs, cur.SettledMs)
	index, unaudited := "idx_audit", "audited_time = 0 AND "
	if all {
		index, unaudited = "idx_settled", ""
	}
	rows, err := j.db.QueryContext(ctx, `SELECT seq, settled_time, positions, audited_time FROM `+j.table+` FORCE INDEX (`+index+`)
		WHERE `+unaudited+`settled_time <= ? AND ((settled_time = ? AND seq > ?) OR settled_time > ?)
		ORDER BY settled_time, seq LIMIT ?`, toMs, from, cur.Seq, from, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", j.name, err)
	}
	defer rows.Close()
	var out []Entry
	for rows.Next() {
		var e Entry
		var b []byte
		if err := rows.Scan(&e.Seq, &e.SettledMs, &b, &e.AuditedMs); err != nil {
			return nil, fmt.Errorf("read %s: %w", j.name, err)
		}
		if e.Positions, e.Err = Decode(b); e.Err != nil {
			e.Err = fmt.Errorf("entry %d of %s: %w", e.Seq, j.name, e.Err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", j.name, err)
	}
	return out, nil
}

// MarkAudited records nowMs as the audit time of the entries seqs, in one statement.
func (j *Journal) MarkAudited(ctx context.Context, seqs []int64, nowMs int64) error {
	if len(seqs) == 0 {
		return nil
	}
	args := []any{nowMs}
	for _, s := range seqs {
		args = append(args, s)
	}
	_, err := j.db.ExecContext(ctx, `UPDATE `+j.table+` SET audited_time = ? WHERE seq IN (`+
		strings.TrimSuffix(strings.Repeat("?, ", len(seqs)), ", ")+`)`, args...)
	if err != nil {
		return fmt.Errorf("mark %d entries of %s audited: %w", len(seqs), j.name, err)
	}
	return nil
}

// Found is a row's position as the journal recorded it, and when the audit finished its
// entry.
type Found struct {
	Pos
	// AuditedMs is epoch ms the audit finished the entry (all its rows answered for); 0:
	// not yet.
	AuditedMs int64
}

// Find returns where the broker stored row id by the send the write-back settled at
// settledMs (the row's next_retry_time while it is sent), and whether the journal has it.
// A damaged entry is passed over: another entry may hold the row.
func (j *Journal) Find(ctx context.Context, id, settledMs int64) (Found, bool, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT positions, audited_time FROM `+j.table+` FORCE INDEX (idx_settled)
		WHERE settled_time = ? AND first_id <= ? AND last_id >= ? ORDER BY seq DESC`, settledMs, id, id)
	if err != nil {
		return Found{}, false, fmt.Errorf("find row %d in %s: %w", id, j.name, err)
	}
	defer rows.Close()
	for rows.Next() {
		var b []byte
		var audited int64
		if err := rows.Scan(&b, &audited); err != nil {
			return Found{}, false, fmt.Errorf("find row %d in %s: %w", id, j.name, err)
		}
		ps, err := Decode(b)
		if err != nil {
			continue // a damaged entry says nothing; another may
		}
		for _, p := range ps {
			if p.ID == id {
				return Found{Pos: p, AuditedMs: audited}, true, nil
			}
		}
	}
	if err := rows.Err(); err != nil {
		return Found{}, false, fmt.Errorf("find row %d in %s: %w", id, j.name, err)
	}
	return Found{}, false, nil
}

// Purge deletes up to limit entries settled before beforeMs, oldest first, and returns how
// many it deleted. It runs in READ COMMITTED: under REPEATABLE READ the DELETE would also
// lock the gap after the last entry it deletes, up to the journal's end when no newer entry
// exists, and the relay's appends would wait for it.
func (j *Journal) Purge(ctx context.Context, beforeMs int64, limit int) (int64, error) {
	tx, err := j.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, fmt.Errorf("purge %s: %w", j.name, err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM `+j.table+` WHERE settled_time < ? ORDER BY settled_time LIMIT ?`, beforeMs, limit)
	if err != nil {
		return 0, fmt.Errorf("purge %s: %w", j.name, err)
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("purge %s: %w", j.name, err)
	}
	return n, nil
}
