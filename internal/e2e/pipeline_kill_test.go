// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The pipelined engine has pages in several stages at once: one being read ahead, one being
// published, and acknowledged ones waiting for their coalesced write-back. These tests
// hold the relay process in each stage with a real cause (a table lock, a slow broker, a
// row lock), check from outside that it is there, kill it with SIGKILL, and restart it:
// every committed row must end sent and stored at the broker. A message may be stored
// twice only when its row was not marked sent at the kill.

const (
	killFast = "orders" // a topic the broker answers at once
	killSlow = "slow"   // a topic whose sends the broker holds (Latency)
)

// TestKillWhileAPageIsBeingRead: a LOCK TABLES ... WRITE taken mid-stream holds the relay's
// next page read (and any write-back behind it); the relay is killed while the processlist
// shows its page query waiting, with earlier pages published.
func TestKillWhileAPageIsBeingRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const total = 3000
	insertTopics(t, e, "read", total, killFast)
	e.broker.SetTopicFaults(killFast, rmqtest.Faults{Latency: 200 * time.Millisecond}) // a stream, not one burst
	p := e.startRelay(t, "OUTBOX_RELAY_BATCH_SIZE=100")
	eventually(t, 20*time.Second, "a part of the backlog sent", func() bool { return e.count(t, "status = 2") >= 500 })

	ctx := context.Background()
	holder, err := e.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "LOCK TABLES local_message WRITE"); err != nil {
		t.Fatal(err)
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			if _, err := holder.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
				t.Error(err)
			}
		}
	}
	defer unlock()
	// No query on local_message from here until UNLOCK: it would wait too.
	eventually(t, 10*time.Second, "the relay's page read waiting on the table lock", func() bool {
		return waitingStatements(t, e, "SELECT id, COALESCE(msg_id%", "%metadata lock%") > 0
	})
	p.Kill9(t)
	unlock()

	sentAtKill := sentMsgIDs(t, e)
	if len(sentAtKill) == 0 || len(sentAtKill) == total {
		t.Fatalf("%d of %d rows sent at the kill: the kill was not mid-stream", len(sentAtKill), total)
	}
	restartAndCheckNothingLost(t, e, total, sentAtKill)
}

// TestKillWhileSendsAreInFlight: every page holds messages of a topic the broker answers at
// once and of one it holds for a second. When a page's fast messages are stored its slow
// ones are in flight; the relay is frozen (SIGSTOP) there, the broker then stores the slow
// messages and answers a process that cannot read the answer, and the relay is killed.
// Those messages are on the broker while their rows are still pending: they must be sent
// again, never lost.
func TestKillWhileSendsAreInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const total = 2000
	insertTopics(t, e, "fly", total, killFast, killSlow)
	e.broker.SetTopicFaults(killSlow, rmqtest.Faults{Latency: time.Second})
	p := e.startRelay(t, "OUTBOX_RELAY_BATCH_SIZE=100", "OUTBOX_ROCKETMQ_SEND_TIMEOUT=5s")
	eventually(t, 20*time.Second, "a second page's fast messages stored", func() bool { return e.broker.Count(killFast) >= 100 })
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	slowAtStop := e.broker.Count(killSlow)
	eventually(t, 10*time.Second, "slow sends in flight at the freeze to be stored", func() bool {
		return e.broker.Count(killSlow) > slowAtStop
	})
	p.Kill9(t) // SIGKILL ends a stopped process too

	sentAtKill := sentMsgIDs(t, e)
	if len(sentAtKill) == total {
		t.Fatal("every row was sent before the kill: the test proves nothing")
	}
	storedUnmarked := 0
	for _, m := range e.broker.Messages(killSlow) {
		if !sentAtKill[m.Properties[outbox.MsgIDProperty]] {
			storedUnmarked++
		}
	}
	if storedUnmarked == 0 {
		t.Fatal("no message was stored and left unmarked at the kill: no ack was in flight")
	}
	t.Logf("at the kill: %d rows sent, %d slow messages stored and not marked sent (acks unread or write-backs pending)", len(sentAtKill), storedUnmarked)
	restartAndCheckNothingLost(t, e, total, sentAtKill)
}

// TestKillWhileAWriteBackIsPending: a transaction holding one row's lock holds the
// write-back of its page after the broker acknowledged it; later pages keep being
// published meanwhile (the pipeline), and the relay is killed while the write-back waits.
func TestKillWhileAWriteBackIsPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const total = 3000
	insertTopics(t, e, "wb", total, killFast)
	ctx := context.Background()
	var heldID int64
	var heldMsgID string
	if err := e.db.QueryRow("SELECT id, msg_id FROM local_message ORDER BY id LIMIT 1 OFFSET 1050").Scan(&heldID, &heldMsgID); err != nil {
		t.Fatal(err)
	}
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := tx.QueryRow("SELECT id FROM local_message WHERE id = ? FOR UPDATE", heldID).Scan(&heldID); err != nil {
		t.Fatal(err)
	}
	p := e.startRelay(t, "OUTBOX_RELAY_BATCH_SIZE=100")
	// The held row's page is acknowledged, pages after it are published, and the held row
	// is still pending: its write-back waits on the lock.
	eventually(t, 20*time.Second, "the held row's page and later pages published", func() bool {
		return storedMsgIDs(e)[heldMsgID] > 0 && e.broker.Count(killFast) >= 1300
	})
	eventually(t, 10*time.Second, "the relay's write-back in progress behind the held row", func() bool {
		return waitingStatements(t, e, "UPDATE%", "Updating") > 0
	})
	if n := e.count(t, "id = ? AND status = 0", heldID); n != 1 {
		t.Fatal("the held row is not pending: its write-back did not wait")
	}
	p.Kill9(t)
	// Read what was marked sent before releasing the lock: the killed relay's UPDATE is
	// still waiting on it in the server (a lock wait does not notice its client is gone),
	// and once the lock is released it completes, autocommitted, marking the held row sent,
	// which is true (the broker acknowledged it) but says nothing of the state at the kill.
	// The plain read does not wait for the lock.
	sentAtKill := sentMsgIDs(t, e)
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if sentAtKill[heldMsgID] {
		t.Fatal("the held row was marked sent before the kill")
	}
	unmarked := 0
	for id := range storedMsgIDs(e) {
		if !sentAtKill[id] {
			unmarked++
		}
	}
	t.Logf("at the kill: %d rows sent, %d acknowledged messages waiting for their write-back", len(sentAtKill), unmarked)
	restartAndCheckNothingLost(t, e, total, sentAtKill)
}

// insertTopics commits n rows whose topics go round topics.
func insertTopics(t *testing.T, e *env, prefix string, n int, topics ...string) {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%06d", prefix, i), Topic: topics[i%len(topics)],
			Keys: []string{fmt.Sprintf("SN%d", i)}, Body: []byte(fmt.Sprintf(`{"orderSn":"SN%d"}`, i))}
	}
	if err := e.writer.InsertNoTx(context.Background(), e.db.DB, msgs); err != nil {
		t.Fatal(err)
	}
}

// waitingStatements counts the test database's statements whose text and state match the
// LIKE patterns.
func waitingStatements(t *testing.T, e *env, info, state string) int {
	t.Helper()
	var n int
	err := e.db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
		WHERE DB = ? AND INFO LIKE ? AND STATE LIKE ?`, e.db.Name, info, state).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sentMsgIDs returns the msg_ids of the rows marked sent.
func sentMsgIDs(t *testing.T, e *env) map[string]bool {
	t.Helper()
	rows, err := e.db.Query("SELECT msg_id FROM local_message WHERE status = 2")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// storedMsgIDs returns how many times the broker stored each msg_id, over both topics.
func storedMsgIDs(e *env) map[string]int {
	out := map[string]int{}
	for _, topic := range []string{killFast, killSlow} {
		for _, m := range e.broker.Messages(topic) {
			out[m.Properties[outbox.MsgIDProperty]]++
		}
	}
	return out
}

// restartAndCheckNothingLost checks that every row marked sent at the kill is on the broker,
// starts a new relay without faults, and checks that every row ends sent and stored, and
// that no row marked sent before the kill was published again.
func restartAndCheckNothingLost(t *testing.T, e *env, total int, sentAtKill map[string]bool) {
	t.Helper()
	before := storedMsgIDs(e)
	for id := range sentAtKill {
		if before[id] == 0 {
			t.Fatalf("row %s was marked sent but the broker never stored it", id)
		}
	}
	e.broker.ClearFaults()
	e.startRelay(t, "OUTBOX_RELAY_BATCH_SIZE=100")
	eventually(t, 30*time.Second, "every row sent after the restart", func() bool { return e.count(t, "status = 2") == total })

	stored := storedMsgIDs(e)
	if len(stored) != total {
		t.Fatalf("broker holds %d distinct messages, want %d", len(stored), total)
	}
	dups := 0
	for id, n := range stored {
		if n > 1 {
			dups++
			if sentAtKill[id] && n > before[id] {
				t.Errorf("message %s was published again although its row was marked sent before the kill", id)
			}
		}
	}
	t.Logf("duplicates after the restart: %d (rows unmarked at the kill)", dups)
}
