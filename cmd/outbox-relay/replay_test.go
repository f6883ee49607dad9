// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestReplayCommand: the dry run counts and sends nothing; --execute sends exactly the
// counted rows with the mark, prints a progress line and the final count, and changes no row;
// bad filters exit 2 with what is wrong, before anything is read.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	db, dsn := migrated(t)
	insertRows(t, db, 30, "orders", 2)
	insertRows(t, db, 5, "stock", 2)
	insertRows(t, db, 4, "orders", 0)
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	ns := "--nameservers=" + broker.NameServerAddr()

	r := cli(t, "", false, "replay", dsn, ns, "--topic=orders")
	if r.code != 0 || !strings.Contains(r.out, "dry run: would replay 30 sent row(s) of local_message") || broker.Count("orders") != 0 {
		t.Fatalf("dry run: %+v; broker holds %d", r, broker.Count("orders"))
	}
	r = cli(t, "", false, "replay", dsn, ns, "--topic=orders", "--execute", "--rate=1000")
	if r.code != 0 || !strings.Contains(r.out, "sent 30 of 30 counted, skipped 0") || !strings.Contains(r.out, "last id") || broker.Count("orders") != 30 || broker.Count("stock") != 0 {
		t.Fatalf("execute: %+v; broker holds %d orders, %d stock", r, broker.Count("orders"), broker.Count("stock"))
	}
	for _, m := range broker.Messages("orders") {
		if m.Properties[outbox.ReplayProperty] == "" {
			t.Fatalf("a copy without %s: %v", outbox.ReplayProperty, m.Properties)
		}
	}
	if countStatus(t, db, 2) != 35 || countStatus(t, db, 0) != 4 {
		t.Fatal("the replay changed rows' status")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--since=2026-11-28T00:00:00Z", "--until=2026-11-27T00:00:00Z"}, "the time range is empty"},
		{[]string{"--since=yesterday"}, `--since "yesterday": want RFC 3339`},
		{[]string{"--from-id=9", "--to-id=3"}, "the id range is empty"},
		{[]string{"--key=SN-1 SN-2"}, "a key holds no space"},
		{[]string{"--topic=or/ders"}, "--topic"},
		{[]string{"--rate=0"}, "--rate and --batch must be positive"},
		{[]string{"--msg-ids-file=/nonexistent/ids.txt"}, "--msg-ids-file"},
	} {
		r := cli(t, "", false, append([]string{"replay", dsn, ns, "--execute"}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.errOut, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 saying %q", c.args, r.code, r.errOut, c.want)
		}
	}
	if broker.Count("orders") != 30 {
		t.Errorf("a refused replay sent: the broker holds %d", broker.Count("orders"))
	}
}
