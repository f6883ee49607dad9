// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// audit lists, as a dry run, the sent rows whose messages the broker no longer holds and
// changes nothing (rows an earlier audit finished are checked again with --all only);
// --repair makes them due again; a bad --since is a usage error, and brokers
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
	insertSentRecorded(t, db.DB, 10)
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", broker.NameServerAddr())
	dsn := "--mysql-dsn=" + db.DSN
	// Found present by an earlier audit: only --all checks the rows again.
	if _, err := db.Exec("UPDATE local_message_stored SET audited_time = 1"); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, "", false, "audit", dsn, "--since", "1h"); r.code != 0 || !strings.Contains(r.out, "checked 0:") {
		t.Fatalf("rows audited already, without --all: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	r := cli(t, "", false, "audit", dsn, "--since", "1h", "--all")
	if r.code != 0 || strings.Count(r.out, "local_message: missing id=") != 10 || !strings.Contains(r.out, "missing 10, unknown 0; would repair 10") {
		t.Fatalf("dry run: exit %d\n%s\n%s", r.code, r.out, r.errOut)
	}
	var sent, audited int
	if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM local_message WHERE status = 2), (SELECT COUNT(*) FROM local_message_stored WHERE audited_time = 1)").
		Scan(&sent, &audited); err != nil || sent != 10 || audited != 1 {
		t.Fatalf("the dry run changed rows: %d of 10 sent, %d of 1 entry as it was (%v)", sent, audited, err)
	}
	if r := cli(t, "", false, "audit", dsn, "--since", "soon"); r.code != exitUsage {
		t.Errorf("--since soon: exit %d, want %d (%s)", r.code, exitUsage, r.errOut)
	}
	r = cli(t, "", false, "audit", dsn, "--since", "1h", "--repair", "--all")
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

// insertSentRecorded writes n rows of topic "history" sent a minute ago by the database's
// clock, with their positions in the journal (one entry): offsets 11 to 10+n of broker-a's
// queues, round robin.
func insertSentRecorded(t *testing.T, db *sql.DB, n int) {
	t.Helper()
	ddl, err := schema.StoredLogDDL("local_message")
	if err != nil {
		t.Fatal(err)
	}
	var settled int64
	if err := db.QueryRow("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 60000").Scan(&settled); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{ddl, `INSERT INTO local_message (msg_id, topic, content, status, next_retry_time, sent_time)
		SELECT CONCAT('h-', seq), 'history', '{}', 2, ` + strconv.FormatInt(settled, 10) + `, 1 FROM seq_1_to_` + strconv.Itoa(n)} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	e := storedlog.Entry{SettledMs: settled}
	for i := 1; i <= n; i++ {
		var id int64
		if err := db.QueryRow("SELECT id FROM local_message WHERE msg_id = ?", "h-"+strconv.Itoa(i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		e.Positions = append(e.Positions, storedlog.Pos{ID: id, Broker: "broker-a", QueueID: i % 4, Offset: int64(10 + i), CommitOffset: -1})
	}
	j, err := storedlog.Open(db, "local_message")
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(context.Background(), []storedlog.Entry{e}); err != nil {
		t.Fatal(err)
	}
}
