// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/tcpproxy"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestMySQLFailoverOldPrimaryLeftReadOnly: the relay process against a primary and its
// replica behind a proxy. At the failover the old primary goes read-only and stays up with
// the relay's connections open, and the proxy sends new connections to the promoted replica.
// /readyz says the server is read-only while the relay's connections reach it; every row
// committed on the new primary after the switch is sent within 30 s by the same process, which
// then exits at once on SIGTERM.
func TestMySQLFailoverOldPrimaryLeftReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dbs := testenv.StartReplicated(t)
	old, err := sql.Open("mysql", dbs.DSN(dbs.Primary))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := schema.Migrate(context.Background(), old, "local_message"); err != nil {
		t.Fatal(err)
	}
	proxy, err := tcpproxy.Start(dbs.Primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	p := e.startRelay(t, "OUTBOX_MYSQL_DSN="+dbs.DSN(proxy.Addr()))
	insert := func(db *sql.DB, prefix string, n int) {
		msgs := make([]outbox.Message, n)
		for i := range msgs {
			msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%02d", prefix, i), Topic: "orders", Body: []byte("o")}
		}
		if err := e.writer.InsertNoTx(context.Background(), db, msgs); err != nil {
			t.Fatal(err)
		}
	}
	sent := func(db *sql.DB, prefix string) int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE msg_id LIKE ? AND status = 2", prefix+"-%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert(old, "before", 10)
	eventually(t, 60*time.Second, "the rows written before the failover sent", func() bool { return sent(old, "before") == 10 })

	dbs.Failover(t)
	// Until the proxy moves, every connection reaches the read-only server.
	eventually(t, 10*time.Second, "/readyz to say the server is read-only", func() bool {
		body, code := httpGet(p, "/readyz")
		return code == 503 && strings.Contains(body, "read-only")
	})
	proxy.SetTarget(dbs.Replica)
	switched := time.Now()
	primary, err := sql.Open("mysql", dbs.DSN(dbs.Replica))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	insert(primary, "after", 20)
	eventually(t, 30*time.Second-time.Since(switched), "the 20 rows committed after the failover sent", func() bool {
		return sent(primary, "after") == 20
	})
	t.Logf("20 rows written after the failover sent %.1fs after it", time.Since(switched).Seconds())
	eventually(t, 10*time.Second, "/readyz and /healthz green on the new primary", func() bool {
		_, ready := httpGet(p, "/readyz")
		_, healthy := httpGet(p, "/healthz")
		return ready == 200 && healthy == 200
	})
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err, ok := p.Wait(10 * time.Second); !ok || err != nil {
		t.Fatalf("the relay did not exit cleanly within 10 s of SIGTERM: exited %v, %v", ok, err)
	}
}
