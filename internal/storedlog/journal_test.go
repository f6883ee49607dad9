// SPDX-License-Identifier: Apache-2.0

package storedlog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

func openJournal(t *testing.T) (*testenv.DB, *storedlog.Journal) {
	t.Helper()
	db := testenv.MySQL(t)
	ddl, err := schema.StoredLogDDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	j, err := storedlog.Open(db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	return db, j
}

func page(first int64, n int, broker string) []storedlog.Pos {
	ps := make([]storedlog.Pos, n)
	for i := range ps {
		ps[i] = storedlog.Pos{ID: first + int64(i), Broker: broker, QueueID: i % 4, Offset: 100 + int64(i), CommitOffset: -1}
	}
	return ps
}

// TestJournalAppendWindowAudit: entries come back in settled order after the cursor, an
// audited entry leaves the window (unless all), and each row is found by its send.
func TestJournalAppendWindowAudit(t *testing.T) {
	ctx := context.Background()
	db, j := openJournal(t)
	if ok, err := schema.HasStoredLog(ctx, db.DB, "local_message"); err != nil || !ok {
		t.Fatalf("HasStoredLog = %v, %v", ok, err)
	}
	if err := j.Append(ctx, []storedlog.Entry{
		{SettledMs: 2000, Positions: page(11, 5, "broker-b")},
		{SettledMs: 1000, Positions: page(1, 10, "broker-a")},
		{SettledMs: 3000, Positions: page(16, 3, "broker-a")},
	}); err != nil {
		t.Fatal(err)
	}
	es, err := j.Window(ctx, 0, 2500, storedlog.Cursor{}, false, 10)
	if err != nil || len(es) != 2 || es[0].SettledMs != 1000 || es[1].SettledMs != 2000 || len(es[1].Positions) != 5 {
		t.Fatalf("window = %+v, %v", es, err)
	}
	next, err := j.Window(ctx, 0, 5000, storedlog.Cursor{SettledMs: es[0].SettledMs, Seq: es[0].Seq}, false, 1)
	if err != nil || len(next) != 1 || next[0].Seq != es[1].Seq {
		t.Fatalf("after the first: %+v, %v", next, err)
	}
	if err := j.MarkAudited(ctx, []int64{es[0].Seq}, 9000); err != nil {
		t.Fatal(err)
	}
	if left, err := j.Window(ctx, 0, 5000, storedlog.Cursor{}, false, 10); err != nil || len(left) != 2 || left[0].SettledMs != 2000 {
		t.Fatalf("after auditing the first: %+v, %v", left, err)
	}
	if all, err := j.Window(ctx, 0, 5000, storedlog.Cursor{}, true, 10); err != nil || len(all) != 3 || all[0].AuditedMs != 9000 {
		t.Fatalf("all: %+v, %v", all, err)
	}
	p, ok, err := j.Find(ctx, 13, 2000)
	if err != nil || !ok || p.Broker != "broker-b" || p.Offset != 102 {
		t.Fatalf("find 13 = %+v %v %v", p, ok, err)
	}
	if _, ok, err := j.Find(ctx, 13, 1000); err != nil || ok {
		t.Fatalf("row 13 by another send: %v %v", ok, err)
	}
	if n, err := j.Purge(ctx, 2500, 100); err != nil || n != 2 {
		t.Fatalf("purge = %d, %v", n, err)
	}
}

// TestJournalCorruptEntryIsReturnedWithItsError: a damaged entry does not stop the read;
// it comes back marked so that the audit can count it and move on.
func TestJournalCorruptEntryIsReturnedWithItsError(t *testing.T) {
	ctx := context.Background()
	db, j := openJournal(t)
	if _, err := db.Exec("INSERT INTO local_message_stored (settled_time, first_id, last_id, row_count, positions) VALUES (1, 1, 1, 1, x'02')"); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(ctx, []storedlog.Entry{{SettledMs: 2, Positions: page(5, 2, "b")}}); err != nil {
		t.Fatal(err)
	}
	es, err := j.Window(ctx, 0, 10, storedlog.Cursor{}, false, 10)
	if err != nil || len(es) != 2 || !errors.Is(es[0].Err, storedlog.ErrCorrupt) || es[1].Err != nil || len(es[1].Positions) != 2 {
		t.Fatalf("window = %+v, %v", es, err)
	}
}

// TestJournalReadsUseTheirIndexes: the audit's window, the lookup of one row and the purge
// each reach the journal by an index, never a full scan.
func TestJournalReadsUseTheirIndexes(t *testing.T) {
	db, _ := openJournal(t)
	for q, key := range map[string]string{
		"SELECT seq FROM local_message_stored FORCE INDEX (idx_audit) WHERE audited_time = 0 AND settled_time <= 5 AND ((settled_time = 1 AND seq > 0) OR settled_time > 1) ORDER BY settled_time, seq LIMIT 10": "idx_audit",
		"SELECT seq FROM local_message_stored FORCE INDEX (idx_settled) WHERE settled_time = 5 AND first_id <= 3 AND last_id >= 3":                                                                               "idx_settled",
	} {
		plan := testenv.Explain(t, db.DB, q)
		if len(plan) == 0 || plan[0]["key"] != key {
			t.Errorf("%s: plan %v", q, plan)
		}
	}
}
