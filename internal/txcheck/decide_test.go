// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

const testSecret = "decide-test-secret-0123"

// signed returns the properties of a half of msgID to topic signed under testSecret, with
// the keys a row without msg_keys has (its msg_id).
func signed(msgID, topic string) map[string]string {
	return map[string]string{outbox.MsgIDProperty: msgID, "KEYS": msgID,
		outbox.SignatureProperty: outbox.SignHalf(testSecret, "local_message", msgID, topic)}
}

// A half whose row is absent and that no writer of ours sent (an SDK writer answering its
// own checks) is answered UNKNOWN while fencing is off (the default), and with it on for
// SDKPatience-1 checks; then a tombstone takes its
// msg_id (dead and deleted: never sent, and the writer's own insert can no longer commit)
// and the answer is ROLLBACK. A half naming a table the relay does not serve, or no
// msg_id, is answered UNKNOWN and touches nothing.
func TestAbsentSDKRowFencedAfterPatience(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	d := &decider{db: db.DB, tables: map[string]bool{"local_message": true}, defTable: "local_message",
		timeout: 2 * time.Second, sdkPatience: 4, now: time.Now, secrets: []string{testSecret}}
	props := signed("sdk-1", "T")
	if a, why := d.decide(ctx, Check{Topic: "T", Properties: props, Times: 9}); a != Unknown || why != ReasonSDKWait {
		t.Fatalf("fencing off: %s/%s, want unknown/%s", a, why, ReasonSDKWait)
	}
	d.fence = true
	for i := 1; i <= 3; i++ {
		if a, why := d.decide(ctx, Check{Topic: "T", Properties: props, Times: i}); a != Unknown || why != ReasonSDKWait {
			t.Fatalf("check %d: %s/%s, want unknown/%s", i, a, why, ReasonSDKWait)
		}
	}
	if a, why := d.decide(ctx, Check{Topic: "T", Properties: props, Times: 4}); a != Rollback || why != ReasonFenced {
		t.Fatalf("check 4: %s/%s, want rollback/%s", a, why, ReasonFenced)
	}
	var st, del int
	if err := db.QueryRowContext(ctx, "SELECT status, is_deleted FROM local_message WHERE msg_id = 'sdk-1'").Scan(&st, &del); err != nil || st != 3 || del != 1 {
		t.Fatalf("tombstone: status %d is_deleted %d (%v), want 3 and 1", st, del, err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO local_message (msg_id, topic, content) VALUES ('sdk-1', 'T', 'late')"); err == nil {
		t.Fatal("the writer's late insert of a fenced msg_id succeeded")
	}
	if a, why := d.decide(ctx, Check{Topic: "T", Properties: props, Times: 5}); a != Rollback || why != ReasonDead {
		t.Fatalf("check after the fence: %s/%s, want rollback/%s", a, why, ReasonDead)
	}
	other := map[string]string{outbox.MsgIDProperty: "x", outbox.TableProperty: "other_table"}
	if a, why := d.decide(ctx, Check{Properties: other, Times: 9}); a != Unknown || why != ReasonUnknownTable {
		t.Fatalf("half of another table: %s/%s", a, why)
	}
	if a, why := d.decide(ctx, Check{Properties: map[string]string{}, Times: 9}); a != Unknown || why != ReasonNoMsgID {
		t.Fatalf("half without msg_id: %s/%s", a, why)
	}
}

// A signed half whose row has other keys (or another topic) is answered UNKNOWN and the row
// is not touched: a half is acted on only for the row it was sent for.
func TestSignedHalfOfAnotherRowTouchesNothing(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO local_message (msg_id, topic, content, msg_keys, next_retry_time) VALUES ('m-1', 'T', 'x', 'order-1', 9999999999999)"); err != nil {
		t.Fatal(err)
	}
	d := &decider{db: db.DB, tables: map[string]bool{"local_message": true}, defTable: "local_message",
		timeout: 2 * time.Second, sdkPatience: 4, now: time.Now, secrets: []string{testSecret}}
	props := signed("m-1", "T")
	props["KEYS"] = "order-2"
	if a, why := d.decide(ctx, Check{Topic: "T", Properties: props, Times: 1}); a != Unknown || why != ReasonMismatch {
		t.Fatalf("other keys: %s/%s, want unknown/%s", a, why, ReasonMismatch)
	}
	props = signed("m-1", "U")
	props["KEYS"] = "order-1"
	if a, why := d.decide(ctx, Check{Topic: "U", Properties: props, Times: 1}); a != Unknown || why != ReasonMismatch {
		t.Fatalf("another topic: %s/%s, want unknown/%s", a, why, ReasonMismatch)
	}
	var next int64
	if err := db.QueryRowContext(ctx, "SELECT next_retry_time FROM local_message WHERE msg_id = 'm-1'").Scan(&next); err != nil || next != 9999999999999 {
		t.Fatalf("next_retry_time %d (%v): the row was pulled forward", next, err)
	}
	props["KEYS"], props[outbox.SignatureProperty] = "order-1", outbox.SignHalf(testSecret, "local_message", "m-1", "T")
	if a, why := d.decide(ctx, Check{Topic: "T", Properties: props, Times: 1}); a != Rollback || why != ReasonRelayDelivers {
		t.Fatalf("its own half: %s/%s, want rollback/%s", a, why, ReasonRelayDelivers)
	}
}

// A check of an adopted table's row with NULLs: a NULL status is unknown and never decided
// (UNKNOWN), a pending row of NULL is_deleted is not deleted (ROLLBACK, the relay sends it);
// neither is a database error.
func TestCheckReadsNullsOfAnAdoptedTable(t *testing.T) {
	ctx := context.Background()
	db := testenv.MySQL(t)
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY status tinyint NULL DEFAULT NULL, MODIFY is_deleted tinyint NULL DEFAULT NULL",
		"INSERT INTO local_message (msg_id, topic, content, status, is_deleted) VALUES ('null-status', 'T', '{}', NULL, 0), ('null-deleted', 'T', '{}', 0, NULL)",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	d := &decider{db: db.DB, tables: map[string]bool{"local_message": true}, defTable: "local_message",
		timeout: 2 * time.Second, sdkPatience: 4, now: time.Now, secrets: []string{testSecret}}
	for _, c := range []struct {
		msgID string
		want  Answer
		why   string
	}{{"null-status", Unknown, ReasonUnknownStatus}, {"null-deleted", Rollback, ReasonRelayDelivers}} {
		if a, why := d.decide(ctx, Check{Topic: "T", Properties: signed(c.msgID, "T"), Times: 1}); a != c.want || why != c.why {
			t.Errorf("%s: %s/%s, want %s/%s", c.msgID, a, why, c.want, c.why)
		}
	}
}
