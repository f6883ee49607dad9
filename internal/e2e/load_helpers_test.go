// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// writers runs loadgen writers on the test's table and topic until the returned stop is
// called; stop returns what they committed and rolled back.
func (e *env) writers(t *testing.T, topic string, m loadgen.Mix) (stop func() *loadgen.Ledger) {
	t.Helper()
	app, err := loadgen.NewApp(context.Background(), e.db.DB, e.writer, topic, true)
	if err != nil {
		t.Fatal(err)
	}
	l := loadgen.NewLedger()
	stopApp := app.Start(m, l, "")
	stop = func() *loadgen.Ledger {
		if err := stopApp(); err != nil {
			t.Fatalf("writers: %v", err)
		}
		return l
	}
	t.Cleanup(func() { stop() })
	return stop
}

// busyApp is the application: 8 writers, a quarter of the transactions held open up
// to 50 ms, a fifth rolled back, a nudge after each commit.
func busyApp(rate float64) loadgen.Mix {
	m := loadgen.Busy
	m.Rate = rate
	return m
}

// assertLedgerDelivered waits for every committed row of l to be marked sent, then checks
// what users rely on: no row dead, the table holds exactly the committed rows (never one of
// a rolled-back transaction), and the broker stored every committed message and none of a
// rolled-back transaction.
func assertLedgerDelivered(t *testing.T, e *env, topic string, l *loadgen.Ledger, within time.Duration) {
	t.Helper()
	committed, rolledBack := l.Committed(), l.RolledBack()
	if len(committed) == 0 {
		t.Fatal("the writers committed nothing; the test proves nothing")
	}
	eventually(t, within, "every committed row marked sent", func() bool {
		return e.count(t, "topic = ? AND status = 2", topic) == len(committed)
	})
	if n := e.count(t, "topic = ?", topic); n != len(committed) {
		t.Errorf("the table holds %d rows of %s, want the %d committed", n, topic, len(committed))
	}
	if n := e.count(t, "status = 3"); n != 0 {
		t.Errorf("%d rows dead; reasons: %v", n, e.deadReasons(t))
	}
	onBroker := map[string]bool{}
	for _, m := range e.broker.Messages(topic) {
		id := m.Properties[outbox.MsgIDProperty]
		onBroker[id] = true
		if rolledBack[id] {
			t.Errorf("message %s of a rolled-back transaction reached the broker", id)
		}
	}
	missing := 0
	for id := range committed {
		if !onBroker[id] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d committed messages never reached the broker", missing, len(committed))
	}
	t.Logf("%d committed, %d rolled back; %d stored at the broker", len(committed), len(rolledBack), len(e.broker.Messages(topic)))
}

func (e *env) deadReasons(t *testing.T) []string {
	t.Helper()
	rows, err := e.db.Query("SELECT DISTINCT COALESCE(fail_reason, '') FROM local_message WHERE status = 3 LIMIT 5")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		rows.Scan(&s)
		out = append(out, s)
	}
	return out
}

// firstStoreBy is the store time of the first message of topic that group published at or
// after since, and whether there is one.
func firstStoreBy(b *rmqtest.Server, topic, group string, since time.Time) (time.Time, bool) {
	first := int64(-1)
	for _, m := range b.Messages(topic) {
		if m.ProducerGroup == group && m.StoreTimestamp >= since.UnixMilli() && (first < 0 || m.StoreTimestamp < first) {
			first = m.StoreTimestamp
		}
	}
	return time.UnixMilli(first), first >= 0
}

// dsnVia is the test database's DSN through addr (a proxy) instead of the server.
func (e *env) dsnVia(t *testing.T, addr string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(e.db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr = addr
	return cfg.FormatDSN()
}

// mysqlAddr is the MySQL server's host:port.
func (e *env) mysqlAddr(t *testing.T) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(e.db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Addr
}
