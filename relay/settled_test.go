// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The purge and the dashboard's activity find settled rows on the (status, next_retry_time)
// index, through the next_retry_time the write-back gives a row when it settles it (the
// contract has no (status, update_time) index): rows the relay sent or parked dead show in
// the activity of the minute, and a purge deletes the sent ones and only them.
func TestSettledRowsFoundByPurgeAndActivity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var msgs []outbox.Message
	for i := 0; i < 20; i++ {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("ok-%d", i), Topic: "orders", Body: []byte("x")})
	}
	b.insert(t, msgs...)
	// A topic RocketMQ refuses: parked dead without a send.
	if _, err := b.db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES ('bad', 'no such topic!', 'x')"); err != nil {
		t.Fatal(err)
	}
	start, err := ops.DBClock(ctx, b.db.DB)
	if err != nil {
		t.Fatal(err)
	}
	r := b.newRelay(t, b.config())
	if _, err := r.DrainOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, b.db.DB, "status = ?", int(outbox.StatusSent)); n != 20 {
		t.Fatalf("%d rows sent, want 20: %s", n, statusCounts(t, b.db.DB))
	}
	if n := countWhere(t, b.db.DB, "status = ? AND msg_id = 'bad'", int(outbox.StatusDead)); n != 1 {
		t.Fatalf("the bad topic's row is not dead: %s", statusCounts(t, b.db.DB))
	}

	now, err := ops.DBClock(ctx, b.db.DB)
	if err != nil {
		t.Fatal(err)
	}
	act, err := ops.RecentActivity(ctx, b.db.DB, "local_message", start-60, now+2, now+2-(start-60))
	if err != nil {
		t.Fatal(err)
	}
	if len(act) != 1 || act[0].Sent != 20 || act[0].Dead != 1 {
		t.Fatalf("activity = %+v, want 20 sent and 1 dead", act)
	}

	// A purge with a retention of 1 ms deletes rows updated before the database clock's
	// current second: wait until that second is past the write-back's.
	testenv.Eventually(t, 5*time.Second, "the database clock past the write-back's second", func() bool {
		return countWhere(t, b.db.DB, "update_time >= DATE_FORMAT(NOW(), '%Y-%m-%d %H:%i:%s')") == 0
	})
	res, err := ops.Purge(ctx, b.db.DB, "local_message", ops.PurgeOptions{OlderThan: time.Millisecond, BatchSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	if res.Deleted != 20 || countWhere(t, b.db.DB, "1 = 1") != 1 {
		t.Fatalf("purge deleted %d rows, want the 20 sent ones: %s left", res.Deleted, statusCounts(t, b.db.DB))
	}
}
