// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// A table without its stored-position journal (made from the DDL by hand, or by a version
// before the journal): `migrate --check` reports the journal missing (exit 1),
// `--print-sql` prints its online CREATE TABLE and creates nothing, `migrate` creates it and
// keeps the rows, and a second `migrate` has nothing to do.
func TestMigrateCreatesStoredLog(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	dsn := "--mysql-dsn=" + db.DSN
	ddl, _ := schema.DDL("local_message")
	for _, q := range []string{ddl, "INSERT INTO local_message (msg_id, topic, content, status) VALUES ('a', 'T', 'x', 2), ('b', 'T', 'y', 0)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r := cli(t, "", false, "migrate", dsn, "--check")
	if r.code != 1 || !strings.Contains(r.out, "local_message: missing stored-position journal local_message_stored (the broker audit stays off") {
		t.Fatalf("--check: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	r = cli(t, "", false, "migrate", dsn, "--print-sql")
	for _, want := range []string{"-- local_message: online (the application keeps writing)", "CREATE TABLE IF NOT EXISTS `local_message_stored` (",
		"KEY `idx_settled` (`settled_time`)"} {
		if r.code != 0 || !strings.Contains(r.out, want) {
			t.Errorf("--print-sql lacks %q (exit %d):\n%s", want, r.code, r.out)
		}
	}
	if ok, err := schema.HasStoredLog(ctx, db.DB, "local_message"); err != nil || ok {
		t.Fatalf("journal after --print-sql: %v, %v; want none", ok, err)
	}
	if r = cli(t, "", false, "migrate", dsn); r.code != 0 || !strings.Contains(r.out, "fixed: missing stored-position journal local_message_stored") {
		t.Fatalf("migrate: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if ok, err := schema.HasStoredLog(ctx, db.DB, "local_message"); err != nil || !ok {
		t.Fatalf("journal after migrate: %v, %v; want it", ok, err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows after migrate: %d, %v; want 2", n, err)
	}
	if r = cli(t, "", false, "migrate", dsn); r.code != 0 || !strings.Contains(r.out, "local_message: up to date") {
		t.Fatalf("second migrate: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	if r = cli(t, "", false, "migrate", dsn, "--check"); r.code != 0 {
		t.Fatalf("--check after migrate: exit %d\n%s", r.code, r.out)
	}
}
