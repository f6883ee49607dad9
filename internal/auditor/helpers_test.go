// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"strconv"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// AuditTable returns a migrated local_message table and an rmqtest broker with topics of 4
// queues each, closed at cleanup: the setting of this package's tests (exported to its
// external tests only, being in a _test file).
func AuditTable(tb testing.TB, topics ...string) (*testenv.DB, *rmqtest.Server) {
	tb.Helper()
	db := testenv.MySQL(tb)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		tb.Fatal(err)
	}
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

// insertSent writes n rows of topic marked sent agoMs before the database's clock (plus
// their sequence number, 1 to n), recorded at offsets offset+1 to offset+n of broker-a's
// queues (round robin) but never sent: to a broker whose queues are empty, a lost tail.
func insertSent(tb testing.TB, db *testenv.DB, topic string, n int, agoMs, offset int64) {
	tb.Helper()
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, next_retry_time, sent_time, stored_broker, stored_queue, stored_offset)
		SELECT CONCAT(LEFT(?, 1), '-', seq), ?, '{}', 2, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - ? + seq, 1, 'broker-a', seq % 4, ? + seq
		FROM seq_1_to_`+strconv.Itoa(n), topic, topic, agoMs, offset); err != nil {
		tb.Fatal(err)
	}
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
