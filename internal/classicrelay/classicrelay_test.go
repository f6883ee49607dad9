// SPDX-License-Identifier: Apache-2.0

package classicrelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/classicrelay"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

func init() { rlog.SetLogLevel("error") }

// TestProcessOnceAsTheSeed: one firing sends every due row (more than one buffer of 1,000)
// and marks it sent; a row past its retries is skipped, as the seed's scan skips it; a
// refused topic's rows are marked failed with the seed's backoff.
func TestProcessOnceAsTheSeed(t *testing.T) {
	db, rdb, prefix, broker, pub, w := setup(t)
	ctx := context.Background()
	broker.SetTopicFaults("refused", rmqtest.Faults{ErrorRate: 1})
	const n = 1200
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("m-%d", i), Topic: "orders", Body: []byte("{}")}
	}
	msgs = append(msgs, outbox.Message{MsgID: "bad", Topic: "refused", Body: []byte("{}")})
	if err := w.InsertNoTx(ctx, db.DB, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, retry_count, max_retry_count)
		VALUES ('exhausted', 'orders', '{}', 1, 4, 3)`); err != nil {
		t.Fatal(err)
	}

	r, err := classicrelay.New(db.DB, rdb, pub, classicrelay.Config{LockKey: prefix + "LocalMessageScan"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.ProcessOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Sent != n || st.Retried != 1 {
		t.Fatalf("stats %+v, want %d sent and 1 retried", st, n)
	}
	if got := broker.Count("orders"); got != n {
		t.Fatalf("broker stored %d messages, want %d", got, n)
	}
	var sent, skipped int
	db.QueryRow("SELECT COUNT(*) FROM local_message WHERE status = 2").Scan(&sent)
	db.QueryRow("SELECT COUNT(*) FROM local_message WHERE msg_id = 'exhausted' AND status = 1 AND retry_count = 4").Scan(&skipped)
	if sent != n || skipped != 1 {
		t.Fatalf("%d rows sent (want %d), exhausted row untouched: %d", sent, n, skipped)
	}
	var status, retries int
	var next int64
	if err := db.QueryRow("SELECT status, retry_count, next_retry_time FROM local_message WHERE msg_id = 'bad'").Scan(&status, &retries, &next); err != nil {
		t.Fatal(err)
	}
	// Retry 1 waits 2^1 s.
	if wait := next - time.Now().UnixMilli(); status != 1 || retries != 1 || wait < 1000 || wait > 2100 {
		t.Fatalf("refused row: status %d, retry_count %d, next retry in %d ms; want 1, 1, about 2000", status, retries, wait)
	}
}

// setup returns a database with the outbox table, a Redis client and key prefix, a broker, a
// publisher on it and a writer, all closed at cleanup.
func setup(tb testing.TB) (*testenv.DB, *redis.Client, string, *rmqtest.Server, *rocketmq.Publisher, *outbox.Writer) {
	tb.Helper()
	db := testenv.MySQL(tb)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		tb.Fatal(err)
	}
	rdb, prefix := testenv.Redis(tb)
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(broker.Close)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 3 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pub.Close() })
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	return db, rdb, prefix, broker, pub, w
}
