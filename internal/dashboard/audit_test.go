// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestAuditPanelReadsTheAuditors: GET /ui/api/audit shows each table's broker audit from the
// auditors themselves: on where the table has its stored-position journal and the broker
// answers, off with the reason where the table lacks it, and off as disabled; a process that
// runs no relay says it does not know.
func TestAuditPanelReadsTheAuditors(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	var ans AuditAnswer
	if code, raw := b.do(t, "GET", "/ui/api/audit", nil, "", &ans); code != 200 || ans.Known || len(ans.Tables) != 0 {
		t.Fatalf("no auditors: %d %s", code, raw)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	ddl, err := schema.StoredLogDDL(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{ddl, "DROP TABLE IF EXISTS `" + schema.StoredLogTable(otherTable) + "`"} {
		if _, err := b.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{broker.NameServerAddr()}})
	idle := func(ctx context.Context, _ time.Duration) bool { <-ctx.Done(); return false }
	ctx, cancel := context.WithCancel(context.Background())
	var auditors []*auditor.Auditor
	done := make(chan struct{}, 2)
	for _, tb := range []string{table, otherTable} {
		a, err := auditor.New(b.db.DB, lookup, auditor.Config{Database: "default", Table: tb, Log: zerolog.Nop(), Sleep: idle})
		if err != nil {
			t.Fatal(err)
		}
		auditors = append(auditors, a)
		go func() { _ = a.Run(ctx); done <- struct{}{} }()
	}
	t.Cleanup(func() { cancel(); <-done; <-done })
	cfg := b.d.cfg
	cfg.Audit = func() []TableAudit {
		return []TableAudit{AuditOf("default", table, auditors[0]), AuditOf("default", otherTable, auditors[1]),
			{Database: "default", Table: "third", State: "off", Why: "disabled: audit.enabled=false"}}
	}
	d, err := New(b.rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	testenv.Eventually(t, 20*time.Second, "both audits settled", func() bool {
		ans = AuditAnswer{}
		getJSON(t, srv.URL+"/ui/api/audit", &ans)
		return len(ans.Tables) == 3 && ans.Tables[0].State == "on" && ans.Tables[0].LastRound != nil && ans.Tables[1].State == "off"
	})
	on, off := ans.Tables[0], ans.Tables[1]
	if !ans.Known || on.Why != "" || on.Checked != 0 || on.Missing != 0 || on.LagSeconds != 0 {
		t.Errorf("an idle audit: %+v", on)
	}
	if !strings.Contains(off.Why, "no stored-position journal") || off.Checked != 0 {
		t.Errorf("a table without its journal: %+v", off)
	}
	if ans.Tables[2].Why != "disabled: audit.enabled=false" {
		t.Errorf("disabled: %+v", ans.Tables[2])
	}
}
