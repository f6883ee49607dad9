// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// TestRelayClockAheadOfTheDatabase: a relay whose host clock runs 90 s ahead of the
// database's once reported every row 90 s older than it is (outbox_relay_oldest_due_age
// paged OutboxRelayBacklogAge on a healthy table) and sent retries before their time. Every
// age and due time now comes from the database's clock.
func TestRelayClockAheadOfTheDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	cfg := b.config()
	cfg.Metrics = relay.NewMetrics(reg)
	cfg = relay.WithClock(cfg, func() time.Time { return time.Now().Add(90 * time.Second) })
	pub := &countingPublisher{Publisher: b.pub, counts: map[string]int{}}
	r, err := relay.New(b.db.DB, b.rdb, pub, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.broker.StopBroker() // nothing is sent: the rows stay in the backlog
	for i := 0; i < 5; i++ {
		b.insert(t, outbox.Message{MsgID: fmt.Sprintf("fresh-%d", i), Topic: "orders", Body: []byte("x")})
	}
	// A retry due in 60 s by the database's clock: 30 s ago by the relay's.
	b.insert(t, outbox.Message{MsgID: "later", Topic: "orders", Body: []byte("x")})
	if _, err := b.db.Exec("UPDATE local_message SET status = 1, retry_count = 1, next_retry_time = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 60000 WHERE msg_id = 'later'"); err != nil {
		t.Fatal(err)
	}
	run(t, r)
	table := map[string]string{"table": "local_message"}
	eventually(t, 30*time.Second, "the backlog sampled and the fresh rows attempted", func() bool {
		return metric(t, reg, "outbox_relay_pending", table) == 6 &&
			metric(t, reg, "outbox_relay_oldest_due_age_seconds", table) > 0 && pub.count("fresh-4") > 0
	})
	if age := metric(t, reg, "outbox_relay_oldest_due_age_seconds", table); age >= 30 {
		t.Errorf("oldest due age %.0fs for rows written seconds ago: the relay's clock, not the database's", age)
	}
	if n := pub.count("later"); n != 0 {
		t.Errorf("a retry due in 60 s was attempted %d times: due by the relay's clock, not the database's", n)
	}
}
