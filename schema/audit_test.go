// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
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
	ddl, _ := schema.DDL("local_message")
	if _, err := db.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	drops := make([]string, 0, 5)
	for _, c := range schema.AuditColumns() {
		drops = append(drops, "DROP COLUMN "+c)
	}
	if _, err := db.Exec("ALTER TABLE local_message " + strings.Join(drops, ", ")); err != nil {
		t.Fatal(err)
	}
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
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE broker_name IS NULL AND audited_time IS NULL").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows with NULL positions after migrate = %d, %v; want 2", n, err)
	}
}
