// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"database/sql"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// AuditTable returns a migrated local_message table with its stored-position journal and an
// rmqtest broker with topics of 4 queues each, closed at cleanup: the setting of this
// package's tests (exported to its external tests only, being in a _test file).
func AuditTable(tb testing.TB, topics ...string) (*testenv.DB, *rmqtest.Server) {
	tb.Helper()
	db := testenv.MySQL(tb)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		tb.Fatal(err)
	}
	CreateJournal(tb, db.DB, "local_message")
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(broker.Close)
	for _, topic := range topics {
		broker.CreateTopic(topic, 4)
	}
	return db, broker
}

// CreateJournal creates table's stored-position journal in db.
func CreateJournal(tb testing.TB, db *sql.DB, table string) {
	tb.Helper()
	ddl, err := schema.StoredLogDDL(table)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Exec(ddl); err != nil {
		tb.Fatal(err)
	}
}

// insertSentPerEntry is how many rows insertSent records per journal entry.
const insertSentPerEntry = 100

// insertSent writes n rows of topic marked sent agoMs before the database's clock, by
// write-backs of 100 rows (the k-th settled k ms later), and their journal entries,
// recording them at offsets offset+1 to offset+n of broker-a's queues (round robin), but
// never sends them: to a broker whose queues are empty, a lost tail.
func insertSent(tb testing.TB, db *testenv.DB, topic string, n int, agoMs, offset int64) {
	tb.Helper()
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, next_retry_time, sent_time)
		SELECT CONCAT(LEFT(?, 1), '-', seq), ?, '{}', 2, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - ? + (seq - 1) DIV ?, 1
		FROM seq_1_to_`+strconv.Itoa(n), topic, topic, agoMs, insertSentPerEntry); err != nil {
		tb.Fatal(err)
	}
	rows, err := db.Query(`SELECT id, CAST(SUBSTRING(msg_id, 3) AS UNSIGNED), next_retry_time FROM local_message
		WHERE topic = ? AND msg_id LIKE CONCAT(LEFT(?, 1), '-%') ORDER BY id`, topic, topic)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var entries []storedlog.Entry
	for rows.Next() {
		var id, seq, settled int64
		if err := rows.Scan(&id, &seq, &settled); err != nil {
			tb.Fatal(err)
		}
		if len(entries) == 0 || entries[len(entries)-1].SettledMs != settled {
			entries = append(entries, storedlog.Entry{SettledMs: settled})
		}
		e := &entries[len(entries)-1]
		e.Positions = append(e.Positions, storedlog.Pos{ID: id, Broker: "broker-a", QueueID: int(seq % 4), Offset: offset + seq, CommitOffset: -1})
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	j, err := storedlog.Open(db.DB, "local_message")
	if err != nil {
		tb.Fatal(err)
	}
	if err := j.Append(context.Background(), entries); err != nil {
		tb.Fatal(err)
	}
}

// AuditedRows returns how many rows of table are still sent by a send whose journal entry
// the audit has finished (audited_time set): the rows found at the broker.
func AuditedRows(tb testing.TB, db *sql.DB, table string) int {
	tb.Helper()
	j, err := storedlog.Open(db, table)
	if err != nil {
		tb.Fatal(err)
	}
	entries, err := j.Window(context.Background(), 0, 1<<62, storedlog.Cursor{}, true, 1<<30)
	if err != nil {
		tb.Fatal(err)
	}
	audited := map[[2]int64]bool{} // id, settled time
	for _, e := range entries {
		for _, p := range e.Positions {
			if e.AuditedMs > 0 {
				audited[[2]int64{p.ID, e.SettledMs}] = true
			}
		}
	}
	rows, err := db.Query("SELECT id, next_retry_time FROM " + schema.QuoteIdent(table) + " WHERE status = 2")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var k [2]int64
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			tb.Fatal(err)
		}
		if audited[k] {
			n++
		}
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return n
}

// DrainAll runs r's passes until at least n rows are sent (other writers' rows count too),
// failing on an error or a pass that finds nothing to do, and returns the rows sent.
func DrainAll(tb testing.TB, r *relay.Relay, n int) int {
	tb.Helper()
	sent := 0
	for sent < n {
		st, err := r.DrainOnce(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if st.Sent == 0 && st.Read == 0 {
			tb.Fatalf("drain stalled at %d of %d rows", sent, n)
		}
		sent += st.Sent
	}
	return sent
}

// Counter sums the series of the counter name in reg, those with ordered=orderedLabel only
// unless it is empty.
func Counter(t *testing.T, reg *prometheus.Registry, name, orderedLabel string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if orderedLabel != "" && l.GetName() == "ordered" && l.GetValue() != orderedLabel {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}
