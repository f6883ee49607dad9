// SPDX-License-Identifier: Apache-2.0

package outboxsql

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

// layout is one way of keeping the broker positions in the outbox table, measured by
// BenchmarkPositionLayouts: the audit columns' definitions (replacing the contract's) and
// the write-back that marks rows sent and records their positions.
type layout struct {
	name string
	// cols are ADD COLUMN definitions; nil keeps the contract's audit columns.
	cols []string
	// instant keeps the table as the ALTER replacing the columns left it (ALGORITHM=INSTANT
	// on MariaDB: rows inserted later carry the instant-ALTER format); otherwise it is
	// rebuilt, as a table created with the columns is.
	instant bool
	// migrated starts from a table with the earlier NULLable columns and a few rows, and
	// migrates it (schema.Migrate) before the rows measured are inserted.
	migrated bool
	// join writes the positions from a derived table joined on id instead of CASE on id.
	join bool
	// set returns the SET clauses of the audit columns (CASE form: the values of rows
	// ids; join form: columns of p) and their arguments, for the rows ids.
	set func(ids []int64, p []pos) (string, []any)
}

// pos is a synthetic broker position: rows are sent in batches of 32, each batch to one of
// 8 queues of broker-a at consecutive offsets, as the relay's batch sends are.
type pos struct {
	broker  string
	queue   int
	offset  int64
	commit  int64
	omidHex string
}

func synthPos(i int64) pos {
	commit := 1_000_000 + i*320
	return pos{broker: "broker-a", queue: int(i/32) % 8, offset: 10_000 + i, commit: commit,
		omidHex: fmt.Sprintf("7F00000100002A9F%016X", commit)}
}

// caseOn is "col = CASE id WHEN ? THEN ? ... END" with its arguments.
func caseOn(col string, ids []int64, val func(int) any) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, 2*len(ids))
	b.WriteString(col + " = CASE id")
	for i, id := range ids {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, id, val(i))
	}
	b.WriteString(" END")
	return b.String(), args
}

// caseSets joins the CASE clauses of cols; broker is one value for the statement.
func caseSets(ids []int64, p []pos, broker any, cols map[string]func(int) any, order []string, tail string) (string, []any) {
	sets := []string{"broker_name = ?"}
	args := []any{broker}
	for _, c := range order {
		s, a := caseOn(c, ids, cols[c])
		sets, args = append(sets, s), append(args, a...)
	}
	if tail != "" {
		sets = append(sets, tail)
	}
	return strings.Join(sets, ", "), args
}

var layouts = []layout{
	{name: "plain"},
	{name: "a-nullable-case", cols: []string{
		"broker_name varchar(128) NULL DEFAULT NULL", "queue_id int NULL DEFAULT NULL", "queue_offset bigint NULL DEFAULT NULL",
		"offset_msg_id varchar(64) NULL DEFAULT NULL", "audited_time bigint NULL DEFAULT NULL"}, set: func(ids []int64, p []pos) (string, []any) {
		return caseSets(ids, p, "broker-a", map[string]func(int) any{
			"queue_id": func(i int) any { return p[i].queue }, "queue_offset": func(i int) any { return p[i].offset },
			"offset_msg_id": func(i int) any { return p[i].omidHex },
		}, []string{"queue_id", "queue_offset", "offset_msg_id"}, "audited_time = NULL")
	}},
	{name: "b-fixed-case", cols: []string{
		"broker_name char(64) CHARACTER SET ascii NOT NULL DEFAULT ''", "queue_id int NOT NULL DEFAULT -1",
		"queue_offset bigint NOT NULL DEFAULT -1", "offset_msg_id binary(16) NOT NULL DEFAULT ''",
		"audited_time bigint NOT NULL DEFAULT 0"},
		set: func(ids []int64, p []pos) (string, []any) {
			return caseSets(ids, p, "broker-a", map[string]func(int) any{
				"queue_id": func(i int) any { return p[i].queue }, "queue_offset": func(i int) any { return p[i].offset },
				"offset_msg_id": func(i int) any { return omidBytes(p[i].omidHex) },
			}, []string{"queue_id", "queue_offset", "offset_msg_id"}, "audited_time = 0")
		}},
	{name: "c-compact-case", cols: compactCols,
		set: func(ids []int64, p []pos) (string, []any) {
			return caseSets(ids, p, "broker-a", map[string]func(int) any{
				"queue_id": func(i int) any { return p[i].queue }, "queue_offset": func(i int) any { return p[i].offset },
				"commit_offset": func(i int) any { return p[i].commit },
			}, []string{"queue_id", "queue_offset", "commit_offset"}, "audited_time = 0")
		}},
	{name: "c-compact-join", cols: compactCols, join: true,
		set: func(ids []int64, p []pos) (string, []any) {
			return "t.broker_name = ?, t.queue_id = p.q, t.queue_offset = p.o, t.commit_offset = p.c, t.audited_time = 0", []any{"broker-a"}
		}},
	{name: "c-compact-join-instant", cols: compactCols, join: true, instant: true,
		set: func(ids []int64, p []pos) (string, []any) {
			return "t.broker_name = ?, t.queue_id = p.q, t.queue_offset = p.o, t.commit_offset = p.c, t.audited_time = 0", []any{"broker-a"}
		}},
	{name: "impl-case", set: implSet},
	{name: "impl-case-added-instant", instant: true, set: implSet},
	{name: "impl-case-migrated", migrated: true, set: implSet},
	{name: "c-smallint-broker-case", cols: []string{
		"broker_name smallint NOT NULL DEFAULT -1", "queue_id smallint NOT NULL DEFAULT -1",
		"queue_offset bigint NOT NULL DEFAULT -1", "commit_offset bigint NOT NULL DEFAULT -1",
		"audited_time bigint NOT NULL DEFAULT 0"},
		set: func(ids []int64, p []pos) (string, []any) {
			return caseSets(ids, p, 1, map[string]func(int) any{
				"queue_id": func(i int) any { return p[i].queue }, "queue_offset": func(i int) any { return p[i].offset },
				"commit_offset": func(i int) any { return p[i].commit },
			}, []string{"queue_id", "queue_offset", "commit_offset"}, "audited_time = 0")
		}},
}

// implSet is the write-back of the contract's audit columns as MarkSentAt writes them.
func implSet(ids []int64, p []pos) (string, []any) {
	at := make([]*message.Stored, len(p))
	for i := range p {
		at[i] = &message.Stored{Broker: p[i].broker, QueueID: p[i].queue, Offset: p[i].offset, OffsetMsgID: p[i].omidHex}
	}
	return storedSets(ids, at)
}

var compactCols = []string{
	"broker_name char(32) CHARACTER SET ascii NOT NULL DEFAULT ''", "queue_id smallint NOT NULL DEFAULT -1",
	"queue_offset bigint NOT NULL DEFAULT -1", "commit_offset bigint NOT NULL DEFAULT -1",
	"audited_time bigint NOT NULL DEFAULT 0"}

func omidBytes(h string) []byte {
	b := make([]byte, len(h)/2)
	for i := range b {
		v, _ := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		b[i] = byte(v)
	}
	return b
}

// statement returns l's write-back of ids (retry count 0).
func (l layout) statement(table string, ids []int64, p []pos, nowMs int64) (string, []any) {
	if l.set == nil {
		return `UPDATE ` + table + ` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?
			WHERE id IN (` + placeholders(len(ids)) + `) AND status IN (0, 1) AND ` + schema.RetryCountSQL + ` = ?`,
			append(append([]any{nowMs, nowMs}, int64Args(ids)...), 0)
	}
	sets, sargs := l.set(ids, p)
	if !l.join {
		args := append(append([]any{nowMs, nowMs}, sargs...), int64Args(ids)...)
		return `UPDATE ` + table + ` FORCE INDEX (PRIMARY) SET status = 2, sent_time = ?, next_retry_time = ?, ` + sets + `
			WHERE id IN (` + placeholders(len(ids)) + `) AND status IN (0, 1) AND ` + schema.RetryCountSQL + ` = ?`, append(args, 0)
	}
	var b strings.Builder
	var args []any
	for i, id := range ids {
		if i == 0 {
			b.WriteString("SELECT ? AS id, ? AS q, ? AS o, ? AS c")
		} else {
			b.WriteString(" UNION ALL SELECT ?, ?, ?, ?")
		}
		args = append(args, id, p[i].queue, p[i].offset, p[i].commit)
	}
	args = append(append(append(args, nowMs, nowMs), sargs...), 0)
	return `UPDATE (` + b.String() + `) AS p STRAIGHT_JOIN ` + table + ` AS t FORCE INDEX (PRIMARY) ON t.id = p.id
		SET t.status = 2, t.sent_time = ?, t.next_retry_time = ?, ` + sets + `
		WHERE t.status IN (0, 1) AND COALESCE(t.retry_count, 0) = ?`, args
}

// BenchmarkPositionLayouts marks OUTBOX_BENCH_ROWS (100,000) pending rows sent in
// statements of 500 once per layout of the audit columns, rounds times
// (OUTBOX_BENCH_ROUNDS, 2) interleaved, and reports each run's seconds and the redo it
// wrote (Innodb_os_log_written, server-wide: run it on a server of its own).
func BenchmarkPositionLayouts(b *testing.B) {
	db := testenv.MySQL(b)
	n := benchEnv("OUTBOX_BENCH_ROWS", 100_000)
	rounds := benchEnv("OUTBOX_BENCH_ROUNDS", 2)
	only := os.Getenv("OUTBOX_BENCH_LAYOUTS")
	for r := 0; r < rounds; r++ {
		for _, l := range layouts {
			if only != "" && !strings.Contains(","+only+",", ","+l.name+",") {
				continue
			}
			secs, redo := runLayout(b, db.DB, l, n)
			b.Logf("round %d %-24s %6.2f s %8.1f MB redo %6.0f B/row", r+1, l.name, secs, redo/1e6, redo/float64(n))
		}
	}
}

func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// runLayout creates a table of layout l with n pending rows and marks them sent.
func runLayout(b *testing.B, db *sql.DB, l layout, n int) (secs, redo float64) {
	ctx := context.Background()
	table := "pos_" + strings.ReplaceAll(l.name, "-", "_")
	ddl, _ := schema.DDL(table)
	stmts := []string{"DROP TABLE IF EXISTS " + table, ddl}
	if l.cols == nil && l.instant { // the contract's columns added instantly to a table without them
		stmts = append(stmts, "ALTER TABLE "+table+" DROP COLUMN stored_broker, DROP COLUMN stored_queue, DROP COLUMN stored_offset, "+
			"DROP COLUMN stored_commit_offset, DROP COLUMN stored_audit_time, FORCE", "ALTER TABLE "+table+" "+schemaAuditAdd+", ALGORITHM=INSTANT")
	}
	if l.migrated {
		stmts = append(stmts, "ALTER TABLE "+table+" DROP COLUMN stored_broker, DROP COLUMN stored_queue, DROP COLUMN stored_offset, "+
			"DROP COLUMN stored_commit_offset, DROP COLUMN stored_audit_time, FORCE",
			"ALTER TABLE "+table+` ADD COLUMN broker_name varchar(128) NULL DEFAULT NULL COMMENT 'broker that acknowledged the send',
			ADD COLUMN queue_id int NULL DEFAULT NULL COMMENT 'queue of the acknowledged send',
			ADD COLUMN queue_offset bigint NULL DEFAULT NULL COMMENT 'queue offset of the acknowledged send',
			ADD COLUMN offset_msg_id varchar(64) NULL DEFAULT NULL COMMENT 'broker offset message id of the send',
			ADD COLUMN audited_time bigint NULL DEFAULT NULL COMMENT 'epoch ms of the last audit that found the message at the broker'`,
			"INSERT INTO "+table+" (msg_id, topic, content, status, broker_name, queue_id, queue_offset) SELECT CONCAT('old-', seq), 'orders', '{}', 2, 'broker-a', 1, seq FROM seq_1_to_1000")
	}
	if l.cols != nil {
		drop := "ALTER TABLE " + table
		for i, c := range schema.AuditColumns() {
			if i > 0 {
				drop += ","
			}
			drop += " DROP COLUMN " + c
		}
		for _, c := range l.cols {
			drop += ", ADD COLUMN " + c
		}
		stmts = append(stmts, drop)
		if !l.instant {
			stmts = append(stmts, "ALTER TABLE "+table+" FORCE")
		}
	}
	for _, st := range stmts {
		if _, err := db.ExecContext(ctx, st); err != nil {
			b.Fatalf("%s: %v", st, err)
		}
	}
	stmts = nil
	if l.migrated {
		if err := schema.Migrate(ctx, db, table); err != nil {
			b.Fatal(err)
		}
	}
	stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s (msg_id, topic, tag, content, msg_keys) SELECT CONCAT('m-', seq), 'orders', 'created',
		REPEAT('x', 200), CONCAT('order-', seq) FROM seq_1_to_%d`, table, n))
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			b.Fatalf("%s: %v", s, err)
		}
	}
	var first int64
	if err := db.QueryRow("SELECT MIN(id) FROM " + table + " WHERE status = 0").Scan(&first); err != nil {
		b.Fatal(err)
	}
	before := redoWritten(b, db)
	start := time.Now()
	for lo := 0; lo < n; lo += 500 {
		hi := min(lo+500, n)
		ids := make([]int64, hi-lo)
		ps := make([]pos, hi-lo)
		for i := range ids {
			ids[i] = first + int64(lo+i)
			ps[i] = synthPos(int64(lo + i))
		}
		q, args := l.statement(table, ids, ps, time.Now().UnixMilli())
		res, err := db.ExecContext(ctx, q, args...)
		if err != nil {
			b.Fatalf("%s: %v", l.name, err)
		}
		if k, _ := res.RowsAffected(); k != int64(len(ids)) {
			b.Fatalf("%s: %d rows changed of %d", l.name, k, len(ids))
		}
	}
	secs = time.Since(start).Seconds()
	redo = redoWritten(b, db) - before
	if l.set != nil {
		var ok int
		col := "queue_offset"
		if l.cols == nil {
			col = "stored_offset"
		}
		if err := db.QueryRow("SELECT COUNT(*) FROM "+table+" WHERE status = 2 AND id >= ? AND "+col+" = 10000 + id - ?", first, first).Scan(&ok); err != nil || ok != n {
			b.Fatalf("%s: %d rows of %d recorded as given (%v)", l.name, ok, n, err)
		}
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE "+table); err != nil {
		b.Fatal(err)
	}
	return secs, redo
}

func redoWritten(b *testing.B, db *sql.DB) float64 {
	var name string
	var v float64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_os_log_written'").Scan(&name, &v); err != nil {
		b.Fatal(err)
	}
	return v
}

// schemaAuditAdd adds the contract's audit columns (as migrate's first step does).
const schemaAuditAdd = "ADD COLUMN stored_broker char(48) CHARACTER SET ascii NOT NULL DEFAULT '', ADD COLUMN stored_queue int NOT NULL DEFAULT -1, " +
	"ADD COLUMN stored_offset bigint NOT NULL DEFAULT -1, ADD COLUMN stored_commit_offset bigint NOT NULL DEFAULT -1, " +
	"ADD COLUMN stored_audit_time bigint NOT NULL DEFAULT 0"
