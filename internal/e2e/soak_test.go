// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

// TestSoakBrokerIncidentsAndKills is a minute of production in fast-forward: 8 writers (a
// quarter of the transactions held open up to 50 ms, a fifth rolled back) commit all along
// while the broker answers SYSTEM_BUSY to a tenth of the sends, goes away for 5 s, drops
// connections and loses acks, and the relay is killed with kill -9 twice and restarted, with
// the default retry settings. Every committed row must end sent and on the broker, none dead,
// none of a rolled-back transaction.
func TestSoakBrokerIncidentsAndKills(t *testing.T) {
	if testing.Short() {
		t.Skip("soak test: a minute and a half")
	}
	t.Parallel()
	e := newEnv(t)
	relay := e.startRelay(t)
	stop := e.writers(t, "shop", busyApp(100))

	phase := func(what string, d time.Duration, f func()) {
		t.Logf("%s for %s (committed so far: %d sent)", what, d, e.count(t, "status = 2"))
		f()
		time.Sleep(d) // the incident's length: the schedule of the soak, not a synchronisation
	}
	restart := func() {
		relay.Kill9(t)
		relay = e.startRelay(t)
	}
	busy := rmqtest.Faults{ErrorRate: 0.1, ErrorCode: 2} // SYSTEM_BUSY
	phase("normal traffic", 5*time.Second, func() {})
	phase("10% SYSTEM_BUSY", 8*time.Second, func() { e.broker.SetFaults(busy) })
	phase("kill -9 of the relay, restart", 4*time.Second, restart)
	phase("broker outage", 5*time.Second, func() { e.broker.ClearFaults(); e.broker.StopBroker() })
	phase("broker back", 4*time.Second, func() {
		if err := e.broker.StartBroker(); err != nil {
			t.Fatal(err)
		}
	})
	phase("dropped connections", 6*time.Second, func() { e.broker.SetFaults(rmqtest.Faults{DropBeforeStore: 0.02}) })
	phase("lost acks", 6*time.Second, func() { e.broker.SetFaults(rmqtest.Faults{DropAfterStore: 0.02}) })
	phase("second kill -9 of the relay, restart", 4*time.Second, func() { e.broker.ClearFaults(); restart() })
	phase("10% SYSTEM_BUSY with dropped connections and lost acks", 8*time.Second, func() {
		e.broker.SetFaults(rmqtest.Faults{ErrorRate: 0.1, ErrorCode: 2, DropBeforeStore: 0.01, DropAfterStore: 0.01})
	})
	phase("calm", 3*time.Second, func() { e.broker.ClearFaults() })
	l := stop()
	assertLedgerDelivered(t, e, "shop", l, 90*time.Second)
}
