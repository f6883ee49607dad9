// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// A table of the contract before the audit columns is relayed as it is: Check reports the
// five columns as missing but not fatal, Plan adds them in one ALTER that is instant on
// MariaDB (no rebuild, writers never wait), and Apply runs it online on a table with rows.
func TestAuditColumnsAddedInstantly(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	withoutAuditColumns(t, db.DB)
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content) VALUES ('a', 'T', 'x'), ('b', 'T', 'y')"); err != nil {
		t.Fatal(err)
	}
	if ok, err := schema.HasAuditColumns(ctx, db.DB, "local_message"); err != nil || ok {
		t.Fatalf("HasAuditColumns = %v, %v before migrate; want false", ok, err)
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 5 {
		t.Fatalf("Check = %v, want the five audit columns", problems)
	}
	for _, p := range problems {
		if p.Kind != schema.MissingAuditColumn || p.Fatal() {
			t.Errorf("problem %v: want a non-fatal %q", p, schema.MissingAuditColumn)
		}
	}
	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 1 || !steps[0].Online || !strings.Contains(steps[0].SQL, "ALGORITHM=INSTANT") {
		t.Fatalf("Plan = %+v, want one instant ALTER", steps)
	}
	if err := schema.Apply(ctx, db.DB, "local_message", steps, false); err != nil {
		t.Fatalf("Apply without blocking: %v", err)
	}
	if ok, err := schema.HasAuditColumns(ctx, db.DB, "local_message"); err != nil || !ok {
		t.Fatalf("HasAuditColumns = %v, %v after migrate; want true", ok, err)
	}
	assertUpToDate(t, db.DB, "local_message")
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE stored_broker = '' AND stored_queue = -1 AND stored_offset = -1 AND stored_commit_offset = -1 AND stored_audit_time = 0").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows with no position recorded after migrate = %d, %v; want 2", n, err)
	}
}

// legacyAuditDDL is the ALTER that gave a table the NULLable audit columns of earlier
// versions (their definitions and comments as those versions wrote them).
const legacyAuditDDL = "ALTER TABLE local_message " +
	"ADD COLUMN `broker_name` varchar(128) NULL DEFAULT NULL COMMENT 'broker that acknowledged the send', " +
	"ADD COLUMN `queue_id` int NULL DEFAULT NULL COMMENT 'queue of the acknowledged send', " +
	"ADD COLUMN `queue_offset` bigint NULL DEFAULT NULL COMMENT 'queue offset of the acknowledged send', " +
	"ADD COLUMN `offset_msg_id` varchar(64) NULL DEFAULT NULL COMMENT 'broker offset message id of the send', " +
	"ADD COLUMN `audited_time` bigint NULL DEFAULT NULL COMMENT 'epoch ms of the last audit that found the message at the broker'"

// A table with the earlier, NULLable audit columns (recording into them lengthened every sent
// row: drains twice as slow) is reported, not fatal, and records nothing until migrated;
// Plan adds the fixed-width columns instantly, copies every recorded position into them in
// primary key ranges, then drops the old columns in one online ALTER that rebuilds the
// table. Apply runs it all online on a table with rows: positions are kept, NULL becomes
// "not recorded", and a broker name the new column cannot hold is left not recorded.
func TestCostlyAuditColumnsMigrated(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	withoutAuditColumns(t, db.DB)
	for _, q := range []string{legacyAuditDDL,
		`INSERT INTO local_message (id, msg_id, topic, content, status, broker_name, queue_id, queue_offset, offset_msg_id, audited_time) VALUES
			(1, 'v4', 'T', 'x', 2, 'broker-a', 3, 42, 'C0A8000100002A9F000000000000ABCD', 1800000090000),
			(2, 'v6', 'T', 'x', 2, 'broker-b', 0, 7, '20010DB800000000000000000000000100002A9F00000000000000FF', NULL),
			(3, 'no-id', 'T', 'x', 2, 'broker-c', 1, 8, NULL, NULL),
			(4, 'pending', 'T', 'x', 0, NULL, NULL, NULL, NULL, NULL),
			(5, 'long', 'T', 'x', 2, REPEAT('b', 49), 1, 9, NULL, NULL),
			(6, 'utf8', 'T', 'x', 2, 'brøker', 1, 9, NULL, NULL),
			(7000, 'far', 'T', 'x', 2, 'broker-a', 2, 10, 'C0A8000100002A9F0000000000000010', NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if ok, err := schema.HasAuditColumns(ctx, db.DB, "local_message"); err != nil || ok {
		t.Fatalf("HasAuditColumns = %v, %v with the old columns; want false (nothing recorded)", ok, err)
	}
	problems, err := schema.Check(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, p := range problems {
		kinds[p.Kind]++
		if p.Fatal() {
			t.Errorf("problem %v is fatal; the relay must run on the table", p)
		}
	}
	if kinds[schema.CostlyAuditColumn] != 5 || kinds[schema.MissingAuditColumn] != 5 || len(problems) != 10 {
		t.Fatalf("Check = %v; want the five old columns costly and the five new ones missing", problems)
	}
	steps, err := schema.Plan(ctx, db.DB, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 || !steps[0].Instant || !steps[1].Backfill || !steps[2].Online ||
		!strings.Contains(steps[2].SQL, "DROP COLUMN `broker_name`") || !strings.Contains(steps[2].SQL, "ALGORITHM=INPLACE, LOCK=NONE") ||
		!strings.Contains(steps[2].Note, "REBUILDS") {
		t.Fatalf("Plan = %+v; want the instant ADD, the backfill, the online DROP that rebuilds", steps)
	}
	if err := schema.Apply(ctx, db.DB, "local_message", steps, false); err != nil {
		t.Fatalf("Apply without blocking: %v", err)
	}
	assertUpToDate(t, db.DB, "local_message")
	if ok, err := schema.HasAuditColumns(ctx, db.DB, "local_message"); err != nil || !ok {
		t.Fatalf("HasAuditColumns = %v, %v after migrate; want true", ok, err)
	}
	want := map[int]string{
		1: "broker-a 3 42 43981 1800000090000", 2: "broker-b 0 7 255 0", 3: "broker-c 1 8 -1 0", 4: " -1 -1 -1 0",
		5: " -1 -1 -1 0", 6: " -1 -1 -1 0", 7000: "broker-a 2 10 16 0",
	}
	rows, err := db.Query("SELECT id, CONCAT_WS(' ', stored_broker, stored_queue, stored_offset, stored_commit_offset, stored_audit_time) FROM local_message")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int
		var got string
		if err := rows.Scan(&id, &got); err != nil {
			t.Fatal(err)
		}
		if got != want[id] {
			t.Errorf("row %d after migrate: %q, want %q", id, got, want[id])
		}
		delete(want, id)
	}
	if len(want) != 0 {
		t.Errorf("rows lost by the migration: %v", want)
	}
}

// withoutAuditColumns creates local_message as the contract has it, less the audit columns.
func withoutAuditColumns(t *testing.T, db *sql.DB) {
	t.Helper()
	ddl, _ := schema.DDL("local_message")
	drops := make([]string, 0, 5)
	for _, c := range schema.AuditColumns() {
		drops = append(drops, "DROP COLUMN "+c)
	}
	for _, q := range []string{ddl, "ALTER TABLE local_message " + strings.Join(drops, ", ") + ", FORCE"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}
