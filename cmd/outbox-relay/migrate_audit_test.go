// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// A table with the NULLable audit columns of earlier versions: `migrate --check` reports
// each as a costly audit column (exit 1), `--print-sql` says the last step rebuilds the
// table and shows the copy as a backfill, and `migrate` replaces them keeping the positions.
func TestMigrateCostlyAuditColumns(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	ddl, _ := schema.DDL("local_message")
	drops := []string{}
	for _, c := range schema.AuditColumns() {
		drops = append(drops, "DROP COLUMN "+c)
	}
	for _, q := range []string{ddl, "ALTER TABLE local_message " + strings.Join(drops, ", "),
		"ALTER TABLE local_message ADD COLUMN `broker_name` varchar(128) NULL DEFAULT NULL COMMENT 'broker that acknowledged the send', " +
			"ADD COLUMN `queue_id` int NULL DEFAULT NULL COMMENT 'queue of the acknowledged send', " +
			"ADD COLUMN `queue_offset` bigint NULL DEFAULT NULL COMMENT 'queue offset of the acknowledged send', " +
			"ADD COLUMN `offset_msg_id` varchar(64) NULL DEFAULT NULL COMMENT 'broker offset message id of the send', " +
			"ADD COLUMN `audited_time` bigint NULL DEFAULT NULL COMMENT 'epoch ms of the last audit that found the message at the broker'",
		"INSERT INTO local_message (msg_id, topic, content, status, broker_name, queue_id, queue_offset) VALUES ('a', 'T', 'x', 2, 'broker-a', 2, 5), ('b', 'T', 'y', 0, NULL, NULL, NULL)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r := cli(t, "", false, "migrate", dsn, "--check")
	if r.code != 1 || !strings.Contains(r.out, "local_message: costly audit column broker_name") {
		t.Fatalf("--check: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	r = cli(t, "", false, "migrate", dsn, "--print-sql")
	for _, want := range []string{"ALGORITHM=INSTANT;", "-- backfill: migrate runs it in primary key ranges",
		"REBUILDS the table online", "DROP COLUMN `audited_time`, FORCE, ALGORITHM=INPLACE, LOCK=NONE;"} {
		if r.code != 0 || !strings.Contains(r.out, want) {
			t.Errorf("--print-sql lacks %q (exit %d):\n%s", want, r.code, r.out)
		}
	}
	if r = cli(t, "", false, "migrate", dsn); r.code != 0 {
		t.Fatalf("migrate: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	var got string
	if err := db.QueryRow("SELECT GROUP_CONCAT(CONCAT_WS(' ', msg_id, stored_broker, stored_queue, stored_offset) ORDER BY id) FROM local_message").Scan(&got); err != nil ||
		got != "a broker-a 2 5,b  -1 -1" {
		t.Fatalf("positions after migrate: %q (%v)", got, err)
	}
	if r = cli(t, "", false, "migrate", dsn, "--check"); r.code != 0 {
		t.Fatalf("--check after migrate: exit %d\n%s", r.code, r.out)
	}
}
