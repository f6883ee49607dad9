// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// audit lists, as a dry run, the sent rows whose messages the broker no longer holds and
// changes nothing; --repair makes them due again; a bad --since is a usage error, and brokers
// that cannot be asked fail the command.
func TestAuditCommandDryRunThenRepair(t *testing.T) {
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	broker.CreateTopic("history", 4) // empty: every recorded message is gone
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, next_retry_time, sent_time, stored_broker, stored_queue, stored_offset)
		SELECT CONCAT('h-', seq), 'history', '{}', 2, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 60000, 1, 'broker-a', seq % 4, 10 + seq
		FROM seq_1_to_10`); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", broker.NameServerAddr())
	dsn := "--mysql-dsn=" + db.DSN
	r := cli(t, "", false, "audit", dsn, "--since", "1h")
	if r.code != 0 || strings.Count(r.out, "local_message: missing id=") != 10 || !strings.Contains(r.out, "missing 10, unknown 0; would repair 10") {
		t.Fatalf("dry run: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	var sent int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE status = 2 AND stored_broker <> ''").Scan(&sent); err != nil || sent != 10 {
		t.Fatalf("the dry run changed rows: %d of 10 as they were (%v)", sent, err)
	}
	if r := cli(t, "", false, "audit", dsn, "--since", "soon"); r.code != exitUsage {
		t.Errorf("--since soon: exit %d, want %d (%s)", r.code, exitUsage, r.errOut)
	}
	r = cli(t, "", false, "audit", dsn, "--since", "1h", "--repair")
	if r.code != 0 || !strings.Contains(r.out, "repaired 10") {
		t.Fatalf("repair: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	var due int
	if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE status = 1 AND retry_count = 0 AND fail_reason LIKE 'lost by broker broker-a%'").Scan(&due); err != nil || due != 10 {
		t.Fatalf("%d rows due again after --repair (%v), want 10", due, err)
	}
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", "127.0.0.1:1")
	if r := cli(t, "", false, "audit", dsn, "--since", "1h"); r.code != exitRuntime || !strings.Contains(r.errOut, "cannot be asked") {
		t.Errorf("brokers unreachable: exit %d, want %d\n%s", r.code, exitRuntime, r.errOut)
	}
}
