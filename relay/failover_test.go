// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/tcpproxy"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestFailoverToANewPrimaryWithTheOldOneReadOnly: a MySQL failover that leaves the old primary
// running read-only (Aurora's failover, an orchestrator or MHA switchover) once stopped the
// table until a restart: the pool kept its connections to the old server, every write-back
// was refused, and an idle leader only read there. Two MariaDB servers, the second a replica
// of the first, behind a proxy that moves new connections at the switch and leaves the old
// ones open: every row committed on the new primary after the switch is sent within 30 s,
// by the same relay, which still stops at once when asked.
func TestFailoverToANewPrimaryWithTheOldOneReadOnly(t *testing.T) {
	t.Parallel()
	dbs := testenv.StartReplicated(t)
	dsn, oldAddr, newAddr := dbs.DSN, dbs.Primary, dbs.Replica
	direct, err := sql.Open("mysql", dsn(oldAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := schema.Migrate(context.Background(), direct, "local_message"); err != nil {
		t.Fatal(err)
	}

	proxy, err := tcpproxy.Start(oldAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	// A pool as an application opens it: no connection lifetime of its own.
	pool, err := sql.Open("mysql", dsn(proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	rdb, prefix := testenv.Redis(t)
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(pool, rdb, pub, relay.Config{PollInterval: 50 * time.Millisecond, LockKey: prefix + "lock", LockTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	insert := func(db *sql.DB, prefix string, n int) {
		var msgs []outbox.Message
		for i := 0; i < n; i++ {
			msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%02d", prefix, i), Topic: "orders", Body: []byte("o")})
		}
		if err := w.InsertNoTx(context.Background(), db, msgs); err != nil {
			t.Fatal(err)
		}
	}
	sentOn := func(db *sql.DB, prefix string) int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE msg_id LIKE ? AND status = 2", prefix+"-%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert(direct, "before", 10)
	testenv.Eventually(t, 30*time.Second, "the rows written before the failover sent", func() bool { return sentOn(direct, "before") == 10 })

	// The switch: the old primary goes read-only and stays up, the replica catches up and
	// is promoted, and the proxy sends new connections to it; the relay's stay on the old.
	dbs.Failover(t)
	proxy.SetTarget(newAddr)
	switched := time.Now()

	primary, err := sql.Open("mysql", dsn(newAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	insert(primary, "after", 20)
	testenv.Eventually(t, 30*time.Second-time.Since(switched), "the 20 rows committed after the failover sent", func() bool {
		return sentOn(primary, "after") == 20
	})
	t.Logf("20 rows written after the failover sent %.1fs after it", time.Since(switched).Seconds())
	if n := broker.Count("orders"); n < 30 {
		t.Fatalf("the broker holds %d messages, want the 30 rows", n)
	}

	cancel() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not stop within 10 s of its shutdown")
	}
}
