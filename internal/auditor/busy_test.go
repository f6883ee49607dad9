// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The auditor's statements under busy writers (8 writers, a quarter of their transactions
// held open up to 50 ms, a fifth rolled back) on a table with 5,000 sent rows: the read is
// a range of the (status, next_retry_time) index that reads only its batch, the write-backs
// ranges of the primary key; an audit of every sent row against a broker whose queues lost
// them all (rmqtest, empty queues) repairs each one once, and leaves the writers' rows alone.
func TestAuditStatementsUnderBusyWriters(t *testing.T) {
	db, broker := AuditTable(t, "history")
	ctx := context.Background()
	insertSent(t, db, "history", 5000, 600000, 100000)
	if _, err := db.Exec("ANALYZE TABLE local_message"); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	stop := loadgen.StartBusy(t, db.DB, w, "busy")
	lookup := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{broker.NameServerAddr()}})
	a, err := New(db.DB, lookup, Config{Database: "test", Table: "local_message", Rate: 1e6, Batch: 500})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	q, args := a.st.readQuery(window{from: now - 3600000, to: now}, cursor{settled: now - 300000, id: 0}, 500)
	for _, p := range testenv.Plan(t, db.DB, "ANALYZE", q, args...) {
		if p["key"] != "idx_status_retry" || p["type"] != "range" || strings.Contains(p["Extra"], "filesort") {
			t.Errorf("audit read plan %v; want a range of idx_status_retry in its order", p)
		}
		if n, err := strconv.ParseFloat(p["r_rows"], 64); err != nil || n > 501 {
			t.Errorf("audit read walked %s index entries for a batch of 500", p["r_rows"])
		}
	}
	ids := []int64{1, 2, 3}
	for name, q := range map[string]string{
		"present": "UPDATE `local_message` FORCE INDEX (PRIMARY) SET stored_audit_time = ? WHERE id IN (?, ?, ?) AND status = 2 AND next_retry_time <= ?",
		"repair":  "UPDATE `local_message` FORCE INDEX (PRIMARY) SET status = 1, next_retry_time = ?, fail_reason = CASE id WHEN 1 THEN 'x' WHEN 2 THEN 'y' WHEN 3 THEN 'z' END, stored_broker = '' WHERE id IN (?, ?, ?) AND status = 2 AND next_retry_time <= ?",
	} {
		for _, p := range testenv.Explain(t, db.DB, q, now, ids[0], ids[1], ids[2], now) {
			if p["key"] != "PRIMARY" || p["type"] != "range" {
				t.Errorf("%s write-back plan %v; want a range of the primary key", name, p)
			}
		}
	}
	rep, err := a.Audit(ctx, Range{From: time.UnixMilli(now - 3600000), Repair: true})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checked != 5000 || rep.Missing != 5000 || rep.Repaired != 5000 {
		t.Fatalf("audit under busy writers: %+v; want all 5000 checked, missing and repaired", rep)
	}
	var repaired, others int
	if err := db.QueryRow(`SELECT COALESCE(SUM(topic = 'history' AND status = 1 AND retry_count = 0 AND stored_broker = '' AND fail_reason LIKE 'lost by broker broker-a after acknowledgement: %'), 0),
		COALESCE(SUM(topic <> 'history' AND (status <> 0 OR fail_reason IS NOT NULL)), 0) FROM local_message`).Scan(&repaired, &others); err != nil {
		t.Fatal(err)
	}
	if repaired != 5000 || others != 0 {
		t.Fatalf("%d rows repaired as the broker lost them (want 5000); %d writers' rows touched (want 0)", repaired, others)
	}
}
