// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestAdoptedTableOddRowsNeverStallIt is issue 23, rows 4 and 8, as an adopted table meets
// them: its fail_reason is varchar(150) and a reason is longer; its msg_keys and
// sharding_key are nullable and NULL; a plain-SQL writer put next_retry_time below -2^62.
// Every row settles (sent, or dead with a reason cut to the column), the rows around them
// are delivered, and `status`'s oldest-due age sees the odd row before the relay sends it.
func TestAdoptedTableOddRowsNeverStallIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY fail_reason varchar(150) DEFAULT NULL, MODIFY msg_keys varchar(512) NULL DEFAULT NULL, MODIFY sharding_key varchar(128) NULL DEFAULT NULL",
		"INSERT INTO local_message (msg_id, topic, content, msg_keys, sharding_key) VALUES ('null-keys', 'orders', '{\"n\":1}', NULL, NULL)",
		// A topic RocketMQ refuses, long enough that the reason quoting it exceeds 150 characters.
		"INSERT INTO local_message (msg_id, topic, content) VALUES ('long-reason', '" + strings.Repeat("t", 190) + "', '{}')",
		"INSERT INTO local_message (msg_id, topic, content, next_retry_time, create_time) VALUES ('far-past', 'orders', '{}', -4611686018427387905, NOW() - INTERVAL 1 HOUR)",
	} {
		if _, err := b.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		if _, err := b.db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES (?, 'orders', '{}')", fmt.Sprintf("ok-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Row 8: the odd row is due, and `status` says for how long.
	age, err := ops.OldestDue(ctx, b.db.DB, "local_message", time.Now())
	if err != nil || age < 59*time.Minute {
		t.Errorf("oldest due age with a row due for an hour: %s, %v; want about 1h", age, err)
	}

	run(t, b.newRelay(t, b.config()))
	eventually(t, 30*time.Second, "every row settled", func() bool { return countWhere(t, b.db.DB, "status IN (0, 1)") == 0 })
	if n := countWhere(t, b.db.DB, "status = 2"); n != 22 {
		t.Errorf("%d rows sent, want 22: %s", n, statusCounts(t, b.db.DB))
	}
	var status int
	var reason string
	if err := b.db.QueryRow("SELECT status, fail_reason FROM local_message WHERE msg_id = 'long-reason'").Scan(&status, &reason); err != nil {
		t.Fatal(err)
	}
	if status != int(outbox.StatusDead) || !strings.HasPrefix(reason, "invalid topic") || utf8.RuneCountInString(reason) > 150 {
		t.Errorf("long-reason: status %s, reason %q; want dead with the reason cut to 150 characters", outbox.Status(status), reason)
	}
	for _, m := range b.broker.Messages("orders") {
		if m.Properties[outbox.MsgIDProperty] == "null-keys" && (len(m.Keys) != 1 || m.Keys[0] != "null-keys") {
			t.Errorf("a row with NULL msg_keys went with keys %q, want its msg_id", m.Keys)
		}
	}
}

// TestAdoptedTableNullStateColumns: an adopted table whose state columns allow NULL. A NULL
// retry_count reads as 0 and its write-back guard matches it, so the row is sent once, not
// on every pass; a NULL next_retry_time is due now and a NULL is_deleted is not deleted,
// both sent (by a pass, and by a running relay whose idle probe must see them); a NULL or
// unknown status is never sent nor changed.
func TestAdoptedTableNullStateColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY is_deleted tinyint NULL DEFAULT NULL, MODIFY status tinyint NULL DEFAULT NULL, " +
			"MODIFY retry_count int NULL DEFAULT NULL, MODIFY next_retry_time bigint NULL DEFAULT NULL, MODIFY max_retry_count int NULL DEFAULT NULL",
		"INSERT INTO local_message (msg_id, topic, content, status, retry_count, next_retry_time, is_deleted, max_retry_count) VALUES " +
			"('null-retry', 'orders', '{}', 0, NULL, 0, 0, 3), ('null-next', 'orders', '{}', 0, 0, NULL, 0, 3), " +
			"('null-deleted', 'orders', '{}', 0, 0, 0, NULL, 3), ('all-null', 'orders', '{}', 0, NULL, NULL, NULL, NULL), " +
			"('null-status', 'orders', '{}', NULL, 0, 0, 0, 3), ('status-7', 'orders', '{}', 7, 0, 0, 0, 3), ('deleted', 'orders', '{}', 0, 0, 0, 1, 3)",
	} {
		if _, err := b.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	sent := func(msgID string) int {
		n := 0
		for _, m := range b.broker.Messages("orders") {
			if m.Properties[outbox.MsgIDProperty] == msgID {
				n++
			}
		}
		return n
	}
	r := b.newRelay(t, b.config())
	for pass := 0; pass < 3; pass++ {
		if _, err := r.DrainOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"null-retry", "null-next", "null-deleted", "all-null"} {
		if n, st := sent(id), countWhere(t, b.db.DB, "msg_id = ? AND status = 2", id); n != 1 || st != 1 {
			t.Errorf("%s: sent %d times after three passes, marked sent: %v; want once, sent", id, n, st == 1)
		}
	}
	for _, id := range []string{"null-status", "status-7", "deleted"} {
		if n := sent(id); n != 0 {
			t.Errorf("%s: sent %d times, want never", id, n)
		}
	}
	if n := countWhere(t, b.db.DB, "(msg_id = 'null-status' AND status IS NULL) OR (msg_id = 'status-7' AND status = 7)"); n != 2 {
		t.Errorf("rows of NULL and unknown status changed: %s", statusCounts(t, b.db.DB))
	}

	// A running relay, idle, finds a row whose next_retry_time is NULL.
	run(t, r)
	if _, err := b.db.Exec("INSERT INTO local_message (msg_id, topic, content, status, retry_count, next_retry_time, is_deleted) VALUES ('later-null-next', 'orders', '{}', 0, NULL, NULL, NULL)"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the idle relay sent the row of NULL next_retry_time", func() bool {
		return countWhere(t, b.db.DB, "msg_id = 'later-null-next' AND status = 2") == 1
	})
	if n := sent("later-null-next"); n != 1 {
		t.Errorf("later-null-next sent %d times, want once", n)
	}
}

// TestAdoptedNullRetryBudgetEndsDead: a row of NULL retry_count and max_retry_count whose
// sends keep failing spends the contract's budget (3 retries after the first attempt) and
// goes dead with the broker's reason, instead of being retried for ever.
func TestAdoptedNullRetryBudgetEndsDead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cfg := b.config()
	cfg.Backoff.Base = 20 * time.Millisecond
	cfg.Backoff.Max = 40 * time.Millisecond
	b.broker.SetTopicFaults("broken", rmqtest.Faults{ErrorRate: 1, ErrorCode: 25}) // counted failures
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY retry_count int NULL DEFAULT NULL, MODIFY max_retry_count int NULL DEFAULT NULL",
		"INSERT INTO local_message (msg_id, topic, content, retry_count, max_retry_count) VALUES ('null-budget', 'broken', '{}', NULL, NULL)",
	} {
		if _, err := b.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	run(t, b.newRelay(t, cfg))
	eventually(t, 30*time.Second, "the row dead", func() bool { return countWhere(t, b.db.DB, "status = 3") == 1 })
	if n := countWhere(t, b.db.DB, "msg_id = 'null-budget' AND retry_count = 4 AND max_retry_count IS NULL AND fail_reason LIKE '%CODE: 25%'"); n != 1 {
		t.Errorf("the row went dead without spending the default budget of 3 retries: %s", statusCounts(t, b.db.DB))
	}
}
