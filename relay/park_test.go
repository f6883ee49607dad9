// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Tests of parked rows (rows of an ordered key held behind a head that waits, made due when
// it is): they follow their head whatever happens to it.

// parkedBacklog writes an ordered key whose head waits an hour with held rows behind it,
// and returns a relay of the table after one pass, which parked them.
func parkedBacklog(t *testing.T, b *bundle, held int) (relay.Config, *relay.Relay) {
	t.Helper()
	cfg := b.config()
	cfg.Router = heldBacklog(t, b, held)
	r := b.newRelay(t, cfg)
	ctx := context.Background()
	if _, err := r.DrainOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, b.db.DB, "status = 0 AND next_retry_time > ? AND msg_id LIKE 'held-%'", time.Now().Add(30*time.Minute).UnixMilli()); n != held {
		t.Fatalf("%d of %d held rows parked: %s", n, held, statusCounts(t, b.db.DB))
	}
	return cfg, r
}

// drainUntilSent runs passes of r until want rows are sent, for at most 30 s, then checks
// that the key's held rows reached the broker in order.
func drainUntilSent(t *testing.T, b *bundle, r *relay.Relay, want int, what string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 30*time.Second, what, func() bool {
		if _, err := r.DrainOnce(ctx); err != nil {
			t.Fatal(err)
		}
		return countWhere(t, b.db.DB, "status = 2") == want
	})
	n := 0
	for _, m := range b.broker.Messages("order-events") {
		id := m.Properties[outbox.MsgIDProperty]
		if id == "head" {
			continue
		}
		if want := fmt.Sprintf("held-%06d", n); id != want {
			t.Fatalf("held message %d on the broker is %s, want %s (key order broken)", n, id, want)
		}
		n++
	}
}

// TestParkedKeyFollowsItsDeletedHead: the rows held behind a head that waits an hour are
// parked; then the head is deleted, soft (is_deleted = 1) or hard (DELETE). Nothing holds the
// key any more: its rows are sent in order within seconds, not an hour later.
func TestParkedKeyFollowsItsDeletedHead(t *testing.T) {
	t.Parallel()
	for name, del := range map[string]string{
		"soft": "UPDATE local_message SET is_deleted = 1 WHERE msg_id = 'head'",
		"hard": "DELETE FROM local_message WHERE msg_id = 'head'",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const held = 200
			_, r := parkedBacklog(t, b, held)
			if _, err := b.db.Exec(del); err != nil {
				t.Fatal(err)
			}
			drainUntilSent(t, b, r, held, "the parked rows of a deleted head sent")
		})
	}
}

// TestParkedKeyFollowsItsHeadUnderANewLeader: one relay parks the rows held behind a head
// that waits an hour, then another takes over (a leader change); an operator makes the head
// due now (or requeues it). The new leader sends the head and its key's rows after it, in
// order, within seconds, not an hour later.
func TestParkedKeyFollowsItsHeadUnderANewLeader(t *testing.T) {
	t.Parallel()
	for name, move := range map[string]string{
		"brought-due": "UPDATE local_message SET next_retry_time = 0 WHERE msg_id = 'head'",
		"requeued":    "UPDATE local_message SET status = 0, retry_count = 0, next_retry_time = 0 WHERE msg_id = 'head'",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			const held = 200
			cfg, _ := parkedBacklog(t, b, held)
			next := b.newRelay(t, cfg) // the new leader
			if _, err := b.db.Exec(move); err != nil {
				t.Fatal(err)
			}
			drainUntilSent(t, b, next, held+1, "the head and its parked rows sent by the new leader")
			if got := b.broker.Messages("order-events"); len(got) == 0 || got[0].Properties[outbox.MsgIDProperty] != "head" {
				t.Fatal("the head was not the key's first message on the broker")
			}
		})
	}
}

// TestHeldBacklogBehindAHeadDueSoonIsNotReadAgain: an ordered key's head failed and is due
// again in 30 s, 3,000 of its rows behind it. The passes after the first read only the rows
// written since, not the held backlog again; the held rows stay unsent.
func TestHeldBacklogBehindAHeadDueSoonIsNotReadAgain(t *testing.T) {
	t.Parallel()
	heldBacklogNotReadAgain(t, 30*time.Second)
}
