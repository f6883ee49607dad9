package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Row 15 of issue 26: a row marked is_deleted = 1 (the runbook's "never send") counted as
// pending in `status` and in outbox_relay_pending, so a backlog alert could fire on rows
// nobody will ever send. The binary's gauge and its status command leave them out.
func TestDeletedRowsAreNotBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Three rows waiting for their first attempt (next hour), two of them pending and marked
	// deleted, one failed and deleted, one dead and deleted.
	later := time.Now().Add(time.Hour).UnixMilli()
	if _, err := e.db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, is_deleted, next_retry_time) VALUES
		('wait-1', 'orders', '{}', 0, 0, ?), ('wait-2', 'orders', '{}', 0, 0, ?), ('wait-3', 'orders', '{}', 1, 0, ?),
		('del-1', 'orders', '{}', 0, 1, 0), ('del-2', 'orders', '{}', 0, 1, ?), ('del-3', 'orders', '{}', 1, 1, 0),
		('del-4', 'orders', '{}', 3, 1, 0)`, later, later, later, later); err != nil {
		t.Fatal(err)
	}
	p := e.startRelay(t)
	pending := regexp.MustCompile(`(?m)^outbox_relay_pending\{[^}]*table="local_message"[^}]*\} (\S+)$`)
	var got string
	// Before its first sample the gauge reads 0.
	eventually(t, 15*time.Second, "outbox_relay_pending to be sampled", func() bool {
		m := pending.FindStringSubmatch(metricsOf(p))
		if m != nil {
			got = m[1]
		}
		return m != nil && got != "0"
	})
	if got != "3" {
		t.Fatalf("outbox_relay_pending = %s, want 3 (the deleted rows are not backlog)", got)
	}
	out := e.cli(t, "status")
	for _, want := range []string{"pending      2", "failed       1", "dead         0", "deleted, never sent  4"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if n := e.count(t, "is_deleted = 1 AND status <> 2"); n != 4 {
		t.Fatalf("a deleted row changed status: %d of 4 left unsent", n)
	}
}
