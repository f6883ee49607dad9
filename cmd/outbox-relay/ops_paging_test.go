// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// dead list over several tables pages with a cursor naming the table: 5 dead rows in ta, 3 in
// tb, --limit 5: page 2 shows tb's 3 rows (they were hidden when --after-id applied to every
// table and the limit stopped at the first table).
func TestDeadListPagesOverSeveralTables(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	if r := cli(t, "", false, "migrate", dsn, "--tables=ta,tb"); r.code != 0 {
		t.Fatalf("migrate: %+v", r)
	}
	for tb, n := range map[string]int{"ta": 5, "tb": 3} {
		for i := 0; i < n; i++ {
			if _, err := db.Exec("INSERT INTO "+tb+" (msg_id, topic, content, status, fail_reason) VALUES (?, 'orders', 'x', 3, 'boom')", fmt.Sprintf("%s-%d", tb, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	msgIDs := regexp.MustCompile(`(?m)^t[ab]\s+\d+\s+(t[ab]-\d)\s`)
	r := cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--limit=5")
	m := regexp.MustCompile(`more: next page with --after (\S+)`).FindStringSubmatch(r.out)
	if r.code != 0 || len(msgIDs.FindAllString(r.out, -1)) != 5 || m == nil || m[1] != "ta:5" {
		t.Fatalf("page 1:\n%s", r.out)
	}
	r = cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--limit=5", "--after="+m[1])
	var page2 []string
	for _, g := range msgIDs.FindAllStringSubmatch(r.out, -1) {
		page2 = append(page2, g[1])
	}
	if r.code != 0 || strings.Join(page2, ",") != "tb-0,tb-1,tb-2" || strings.Contains(r.out, "more:") {
		t.Fatalf("page 2 = %v:\n%s", page2, r.out)
	}
	if r := cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--after-id=2"); r.code != exitUsage || !strings.Contains(r.errOut, "--after TABLE:ID") {
		t.Fatalf("--after-id with several tables: %+v", r)
	}
	if r := cli(t, "", false, "dead", "list", dsn, "--tables=ta,tb", "--after=tc:1"); r.code != exitUsage || !strings.Contains(r.errOut, "tc") {
		t.Fatalf("--after on an unconfigured table: %+v", r)
	}
	// One table: --after-id still pages it.
	r = cli(t, "", false, "dead", "list", dsn, "--table=ta", "--after-id=3")
	if r.code != 0 || len(msgIDs.FindAllString(r.out, -1)) != 2 {
		t.Fatalf("--after-id on one table:\n%+v", r)
	}
}

// requeue of a msg-id that no table holds exits non-zero naming it; the others asked for are
// still requeued.
func TestRequeueUnknownMsgIDFails(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content, status, fail_reason) VALUES ('known', 'orders', 'x', 3, 'boom'), ('sent-one', 'orders', 'x', 2, NULL)"); err != nil {
		t.Fatal(err)
	}
	r := cli(t, "", false, "requeue", dsn, "--msg-id=known", "--msg-id=typo-42", "--msg-id=sent-one")
	if r.code != exitRuntime {
		t.Fatalf("exit %d, want %d: %+v", r.code, exitRuntime, r)
	}
	for _, want := range []string{"2 of the 3 msg-id(s) asked for were not requeued", "typo-42: not found in local_message", "sent-one: local_message: not dead: sent"} {
		if !strings.Contains(r.errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.errOut)
		}
	}
	if countStatus(t, db, 0) != 1 || !strings.Contains(r.out, "local_message: requeued 1 row(s)") {
		t.Fatalf("the known dead row was not requeued: %+v", r)
	}
	if r := cli(t, "", false, "requeue", dsn, "--msg-id=known"); r.code != exitRuntime || !strings.Contains(r.errOut, "not dead: pending") {
		t.Fatalf("requeue of a row no longer dead: %+v", r)
	}
}

// Durations accept days everywhere: flags of the operator commands included.
func TestOperatorDurationsAcceptDays(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	insertRows(t, db, 2, "orders", 2)
	insertRows(t, db, 1, "orders", 3)
	if _, err := db.Exec("UPDATE local_message SET update_time = NOW() - INTERVAL 8 DAY"); err != nil {
		t.Fatal(err)
	}
	if r := cli(t, "", false, "purge", dsn, "--older-than=7d", "--dry-run"); r.code != 0 || !strings.Contains(r.out, "would delete 2 sent row(s)") {
		t.Fatalf("purge --older-than=7d: %+v", r)
	}
	if r := cli(t, "", false, "purge", dsn, "--older-than=9d", "--dry-run"); r.code != 0 || !strings.Contains(r.out, "would delete 0 sent row(s)") {
		t.Fatalf("purge --older-than=9d: %+v", r)
	}
	if r := cli(t, "", false, "dead", "list", dsn, "--older-than=7d"); r.code != 0 || strings.Count(r.out, "\n") != 2 {
		t.Fatalf("dead list --older-than=7d: %+v", r)
	}
	if r := cli(t, "", false, "config", dsn, "--poll-interval=1d"); r.code != 0 || !strings.Contains(r.out, "poll_interval: 24h") {
		t.Fatalf("--poll-interval=1d: %+v", r)
	}
	if r := cli(t, "", false, "purge", dsn, "--older-than=7days"); r.code != exitUsage || !strings.Contains(r.errOut, "7d") {
		t.Fatalf("bad duration: %+v", r)
	}
}

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	r := cli(t, "", false, "--version")
	if r.code != 0 || r.out != versionText() || !strings.Contains(r.out, "outbox-relay dev") {
		t.Fatalf("--version: %+v", r)
	}
	// Like the version command, it needs no valid configuration.
	if r := cli(t, "", false, "--version", "--batch-size=0"); r.code != 0 {
		t.Fatalf("--version with a bad configuration: %+v", r)
	}
}
