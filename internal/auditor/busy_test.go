// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The auditor's statements under busy writers (8 writers, a quarter of their transactions
// held open up to 50 ms, a fifth rolled back) on a table with 5,000 sent rows: the read of a
// batch's rows is a range of the primary key that reads only its batch, the repair too; an audit of every sent row against a broker whose queues lost
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
	var firstID int64
	if err := db.QueryRow("SELECT MIN(id) FROM local_message WHERE topic = 'history'").Scan(&firstID); err != nil {
		t.Fatal(err)
	}
	batch := make([]int64, 500)
	for i := range batch {
		batch[i] = firstID + int64(2*i) // every other row: the ids of an entry need not be adjacent
	}
	q, args := a.st.rowsQuery(batch)
	for _, p := range testenv.Plan(t, db.DB, "ANALYZE", q, args...) {
		if p["key"] != "PRIMARY" || p["type"] != "range" {
			t.Errorf("audit read plan %v; want a range of the primary key", p)
		}
		if n, err := strconv.ParseFloat(p["r_rows"], 64); err != nil || n > 500 {
			t.Errorf("audit read read %s rows for a batch of 500", p["r_rows"])
		}
	}
	ids := []int64{1, 2, 3}
	for name, settled := range map[string][]int64{"one send": {now, now, now}, "three sends": {now, now - 1, now - 2}} {
		q, args := a.st.repairQuery(ids, []string{"x", "y", "z"}, settled, now)
		for _, p := range testenv.Explain(t, db.DB, q, args...) {
			if p["key"] != "PRIMARY" || p["type"] != "range" {
				t.Errorf("repair of rows of %s: plan %v; want a range of the primary key", name, p)
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
	if err := db.QueryRow(`SELECT COALESCE(SUM(topic = 'history' AND status = 1 AND retry_count = 0 AND fail_reason LIKE 'lost by broker broker-a after acknowledgement: %'), 0),
		COALESCE(SUM(topic <> 'history' AND (status <> 0 OR fail_reason IS NOT NULL)), 0) FROM local_message`).Scan(&repaired, &others); err != nil {
		t.Fatal(err)
	}
	if repaired != 5000 || others != 0 {
		t.Fatalf("%d rows repaired as the broker lost them (want 5000); %d writers' rows touched (want 0)", repaired, others)
	}
}
