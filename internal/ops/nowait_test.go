// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"testing"
	"time"
)

// TestRequeueAndPurgeNeverWaitForAnOpenWriterTransaction: a writer holds an uncommitted
// outbox row open, with dead and old sent rows committed after it (higher ids). Requeue and
// purge finish within a deadline far shorter than the server's lock wait timeout, and the
// writer's next statement is not blocked by them either.
func TestRequeueAndPurgeNeverWaitForAnOpenWriterTransaction(t *testing.T) {
	b := setup(t)
	conn, err := b.db.Conn(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(b.ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.BeginTx(b.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(b.ctx, "INSERT INTO "+table+" (msg_id, topic, content) VALUES ('open-1', 'orders', 'x')"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		b.insert(t, row{status: 3, failReason: "broken"}, row{status: 2, updAge: 10 * 86400, sentTime: 1})
	}
	ctx, cancel := context.WithTimeout(b.ctx, 3*time.Second)
	defer cancel()
	res, err := Requeue(ctx, b.db, table, Filter{All: true})
	if err != nil || len(res.Requeued) != 5 {
		t.Fatalf("requeue beside an open transaction: %d requeued, %v; want 5 without waiting", len(res.Requeued), err)
	}
	if _, err := Purge(ctx, b.db, table, PurgeOptions{OlderThan: 24 * time.Hour}); err != nil {
		t.Fatalf("purge beside an open transaction: %v", err)
	}
	if _, err := tx.ExecContext(b.ctx, "INSERT INTO "+table+" (msg_id, topic, content) VALUES ('open-2', 'orders', 'x')"); err != nil {
		t.Fatalf("the writer's next insert after requeue and purge: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var sent int
	if err := b.db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE status = 2").Scan(&sent); err != nil || sent != 0 {
		t.Fatalf("%d old sent rows left after the purge (%v), want 0", sent, err)
	}
}
