// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestRequeuedDeadRowsAreDeliveredAndPurgeRunsBesideTheRelay is an operator's day: messages
// died while a topic was broken; once it is fixed, `requeue` brings exactly them back and the
// running relay delivers them; `purge` removes old sent rows while the relay keeps sending.
func TestRequeuedDeadRowsAreDeliveredAndPurgeRunsBesideTheRelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// 25: the broker refuses these requests themselves, which counts (a busy broker would not).
	e.broker.SetTopicFaults("payments", rmqtest.Faults{ErrorRate: 1, ErrorCode: 25})
	var dead []outbox.Message
	for i := 0; i < 20; i++ {
		dead = append(dead, outbox.Message{MsgID: fmt.Sprintf("pay-%02d", i), Topic: "payments", Body: []byte("p"), MaxRetries: outbox.NoRetries})
	}
	if err := e.writer.InsertNoTx(ctx, e.db.DB, dead); err != nil {
		t.Fatal(err)
	}
	// 500 rows sent ten days ago, the history purge is for.
	e.insertN(t, "old", 500)
	if _, err := e.db.Exec(`UPDATE local_message SET status = 2, sent_time = UNIX_TIMESTAMP(NOW() - INTERVAL 10 DAY) * 1000,
		update_time = NOW() - INTERVAL 10 DAY WHERE msg_id LIKE 'old-%'`); err != nil {
		t.Fatal(err)
	}
	e.startRelay(t)
	eventually(t, 30*time.Second, "the payments rows to die", func() bool { return e.count(t, "topic = 'payments' AND status = 3") == 20 })

	e.broker.ClearFaults() // the topic is fixed
	out := e.cli(t, "requeue", "--topic", "payments", "--yes")
	if !strings.Contains(out, "20") {
		t.Fatalf("requeue did not report the 20 rows it changed:\n%s", out)
	}
	eventually(t, 30*time.Second, "the requeued rows delivered", func() bool { return e.count(t, "topic = 'payments' AND status = 2") == 20 })
	if n := e.broker.Count("payments"); n != 20 {
		t.Fatalf("broker has %d payments messages, want 20", n)
	}

	// Purge while new orders keep flowing through the relay.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 10; i++ {
			msgs := make([]outbox.Message, 200)
			for j := range msgs {
				msgs[j] = outbox.Message{MsgID: fmt.Sprintf("new-%d-%03d", i, j), Topic: "orders", Body: []byte("n")}
			}
			if err := e.writer.InsertNoTx(ctx, e.db.DB, msgs); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	out = e.cli(t, "purge", "--older-than", "24h", "--delete-batch-size", "100")
	wg.Wait()
	if !strings.Contains(out, "500") {
		t.Fatalf("purge did not report 500 deleted rows:\n%s", out)
	}
	if n := e.count(t, "msg_id LIKE 'old-%'"); n != 0 {
		t.Fatalf("%d old sent rows left after purge", n)
	}
	eventually(t, 60*time.Second, "the new rows delivered", func() bool { return e.count(t, "msg_id LIKE 'new-%' AND status = 2") == 2000 })
	if n := e.count(t, "topic = 'payments'"); n != 20 {
		t.Fatalf("purge touched recent rows: %d payments rows left, want 20", n)
	}
}

// TestSeveralTablesEachWithItsOwnLock: one process relays two tables, each under a lock of
// its own.
func TestSeveralTablesEachWithItsOwnLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, table := range []string{"outbox_orders", "outbox_payments"} {
		if err := schema.Migrate(ctx, e.db.DB, table); err != nil {
			t.Fatal(err)
		}
		w, err := outbox.NewWriter(outbox.Config{Table: table})
		if err != nil {
			t.Fatal(err)
		}
		msgs := make([]outbox.Message, 300)
		for i := range msgs {
			msgs[i] = outbox.Message{Topic: table, Body: []byte("x")}
		}
		if err := w.InsertNoTx(ctx, e.db.DB, msgs); err != nil {
			t.Fatal(err)
		}
	}
	e.startRelay(t, "OUTBOX_MYSQL_TABLES=outbox_orders,outbox_payments")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr()})
	defer rdb.Close()
	sent := func(table string) int {
		var n int
		if err := e.db.QueryRow("SELECT COUNT(*) FROM " + table + " WHERE status = 2").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, 30*time.Second, "both tables sent under their own locks", func() bool {
		n, err := rdb.Exists(ctx, e.prefix+"lock:outbox_orders", e.prefix+"lock:outbox_payments").Result()
		return err == nil && n == 2 && sent("outbox_orders") == 300 && sent("outbox_payments") == 300
	})
	for _, table := range []string{"outbox_orders", "outbox_payments"} {
		if n := e.broker.Count(table); n != 300 {
			t.Fatalf("broker has %d messages of %s, want 300", n, table)
		}
	}
}
