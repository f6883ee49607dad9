// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/tcpproxy"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// lockTTL and pollInterval are OUTBOX_LOCK_TTL and OUTBOX_RELAY_POLL_INTERVAL of the
// processes these tests start (see env.environ).
// queryTimeout is relay.Config.QueryTimeout's default, which the binary keeps.
const (
	lockTTL      = 2 * time.Second
	pollInterval = 100 * time.Millisecond
	queryTimeout = 5 * time.Second
)

// leading starts relay process group and waits until it has published a row: it holds the lock.
func (e *env) leading(t *testing.T, group string, extra ...string) *proc {
	t.Helper()
	p := e.startRelay(t, append([]string{"OUTBOX_ROCKETMQ_GROUP=" + group}, extra...)...)
	e.insertN(t, "lead-"+group, 1)
	eventually(t, 60*time.Second, group+" to publish", func() bool {
		_, ok := firstStoreBy(e.broker, "orders", group, time.Time{})
		return ok
	})
	return p
}

// TestLeaderKill9StandbyDelivers: writers keep committing while the leader is killed with
// kill -9; the standby takes the lock and delivers every committed row. The gap is logged,
// not asserted (relaybench failover measures it with the default settings).
func TestLeaderKill9StandbyDelivers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.leading(t, "relay-a")
	e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-b")
	stop := e.writers(t, "shop", busyApp(50))
	eventually(t, 60*time.Second, "rows delivered before the kill", func() bool { return e.count(t, "status = 2") >= 50 })

	killed := time.Now()
	a.Kill9(t)
	var took time.Time
	eventually(t, 60*time.Second, "the standby to publish", func() bool {
		var ok bool
		took, ok = firstStoreBy(e.broker, "shop", "relay-b", killed)
		return ok
	})
	t.Logf("delivery gap after kill -9 (lock TTL %s): %s", lockTTL, took.Sub(killed).Round(time.Millisecond))
	eventually(t, 60*time.Second, "the standby to deliver new rows", func() bool { return e.count(t, "status = 2") >= 100 })
	l := stop()
	assertLedgerDelivered(t, e, "shop", l, 60*time.Second)
}

// TestFrozenLeaderStopsAfterSIGCONT: the leader is frozen (SIGSTOP) with a batch in flight,
// longer than the lock TTL; the standby takes over and delivers everything; rows are then
// changed (a newer state: failed, retry later). After SIGCONT the old leader must notice it
// lost the lock: it publishes nothing more and overwrites none of the changed rows.
func TestFrozenLeaderStopsAfterSIGCONT(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Slow sends keep a batch in flight most of the time.
	e.broker.SetFaults(rmqtest.Faults{Latency: 300 * time.Millisecond})
	a := e.leading(t, "relay-a", "OUTBOX_RELAY_BATCH_SIZE=100")
	e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-b", "OUTBOX_RELAY_BATCH_SIZE=100")
	const total = 3000
	e.insertN(t, "frz", total)
	eventually(t, 60*time.Second, "the leader to send a part", func() bool { return e.count(t, "msg_id LIKE 'frz-%' AND status = 2") >= 200 })

	if err := a.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var firstUnsent int64
	if err := e.db.QueryRow("SELECT COALESCE(MIN(id), 0) FROM local_message WHERE status IN (0, 1)").Scan(&firstUnsent); err != nil {
		t.Fatal(err)
	}
	if firstUnsent == 0 {
		t.Fatal("the leader sent everything before the freeze; the test proves nothing")
	}
	eventually(t, 120*time.Second, "the standby to deliver every row while the leader is frozen", func() bool {
		return e.count(t, "status = 2") == total+1
	})
	if _, ok := firstStoreBy(e.broker, "orders", "relay-b", time.Time{}); !ok {
		t.Fatal("every row sent, but not by the standby")
	}
	// The newer state: the rows the frozen leader had read (and a margin of pages after them)
	// are now failed, to be retried in an hour.
	res, err := e.db.Exec(`UPDATE local_message SET status = 1, retry_count = 7, next_retry_time = ?,
		fail_reason = 'changed while the leader was frozen' WHERE id >= ? ORDER BY id LIMIT 500`,
		time.Now().Add(time.Hour).UnixMilli(), firstUnsent)
	if err != nil {
		t.Fatal(err)
	}
	changed, _ := res.RowsAffected()

	resumed := time.Now()
	if err := a.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the resumed leader to report it no longer leads (outbox_relay_leader 0)", func() bool {
		return leaderGauge(t, a) == "0"
	})
	// A row committed after the resume is delivered by the standby, the leader now.
	e.insertN(t, "after-resume", 1)
	eventually(t, 30*time.Second, "a new row delivered after the resume", func() bool {
		return e.count(t, "msg_id LIKE 'after-resume-%' AND status = 2") == 1
	})

	for _, m := range e.broker.Messages("orders") {
		if m.ProducerGroup == "relay-a" && m.StoreTimestamp > resumed.UnixMilli() {
			t.Errorf("the stale leader published %s after SIGCONT", m.Properties["OUTBOX_MSG_ID"])
		}
	}
	if n := e.count(t, "status = 1 AND retry_count = 7 AND fail_reason = 'changed while the leader was frozen'"); int64(n) != changed {
		var status, retries int
		var reason string
		e.db.QueryRow(`SELECT status, retry_count, COALESCE(fail_reason, '') FROM local_message WHERE retry_count = 7
			AND NOT (status = 1 AND fail_reason = 'changed while the leader was frozen') LIMIT 1`).Scan(&status, &retries, &reason)
		t.Errorf("%d of the %d rows changed while the leader was frozen kept their state; the stale leader overwrote the others "+
			"(one now has status %d, retry_count %d, fail_reason %q)", n, changed, status, retries, reason)
	}
	if n := e.count(t, "status = 2"); int64(n) != total+2-changed {
		t.Errorf("%d rows sent, want %d", n, total+2-changed)
	}
	assertSentAreOnBroker(t, e)
}

// frozenPathBound is the bound relay.Config documents for a leader whose database path is
// black-holed: a leader the database has not answered for StallTimeout (default
// max(3 × lock TTL, 2 × QueryTimeout)) gives the lock up, which it checks at each lock tick
// (every TTL/4); a standby tries the lock every TTL/4 and delivers in its first pass, started
// at once and given one poll interval here.
func frozenPathBound(ttl, queryTimeout, poll time.Duration) time.Duration {
	return max(3*ttl, 2*queryTimeout) + ttl/4 + ttl/4 + poll
}

// TestLeaderDatabasePathFrozen: the leader's connection to MariaDB stops forwarding without
// closing (a black-holed path) while its Redis path stays fine; the standby, with a healthy
// path, delivers the rows committed meanwhile within the documented bound.
func TestLeaderDatabasePathFrozen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	proxy, err := tcpproxy.Start(e.mysqlAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	e.leading(t, "relay-a", "OUTBOX_MYSQL_DSN="+e.dsnVia(t, proxy.Addr()))
	e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-b")

	frozen := time.Now()
	proxy.Freeze()
	const n = 100
	e.insertN(t, "after-freeze", n)
	bound := frozenPathBound(lockTTL, queryTimeout, pollInterval)
	eventually(t, bound-time.Since(frozen), fmt.Sprintf("the standby to deliver within %s of the freeze", bound), func() bool {
		return e.count(t, "msg_id LIKE 'after-freeze-%' AND status = 2") == n
	})
	took, _ := firstStoreBy(e.broker, "orders", "relay-b", frozen)
	t.Logf("standby published %s after the leader's database path froze (bound %s)", took.Sub(frozen).Round(time.Millisecond), bound)
	assertSentAreOnBroker(t, e)
}

// leaderGauge is the value of outbox_relay_leader on p's /metrics ("" if not there yet).
func leaderGauge(t *testing.T, p *proc) string {
	t.Helper()
	return metricValue(metricsOf(p), "outbox_relay_leader{")
}

// httpAddr is the address p's HTTP server logged ("" before it did).
func (p *proc) httpAddr() string { return testenv.LoggedHTTPAddr(p.Out.String()) }
