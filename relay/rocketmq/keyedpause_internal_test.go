// SPDX-License-Identifier: Apache-2.0

package rocketmq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/message"
	"github.com/outbox-relay/outbox-relay/schema"
)

// requestCounter counts the send requests (a batch is one) made through a Publisher.
type requestCounter struct {
	*Publisher
	requests atomic.Int64
}

func (c *requestCounter) Send(ctx context.Context, route message.Route, msgs ...*message.Message) error {
	c.requests.Add(1)
	return c.Publisher.Send(ctx, route, msgs...)
}

// TestKeyedBatchingComesBackAfterARefusal: the broker refuses one batch of keyed messages
// (an ACL refusal before the grant lands; a code this version does not know), then takes
// them again. Keyed batches stop for a while, and once the pause is over the relay batches
// the keys of each queue again: the 300 rows of 300 keys that follow go in a few requests,
// not 300, and every one is sent once.
func TestKeyedBatchingComesBackAfterARefusal(t *testing.T) {
	t.Parallel()
	for _, refusal := range []struct {
		name   string
		faults rmqtest.Faults
	}{
		{"acl-before-grant", rmqtest.Faults{ErrorRate: 1, ErrorCode: codeNoPermission, ErrorRemark: "no permission to send message to topic keyed"}},
		{"unlisted-code", rmqtest.Faults{ErrorRate: 1, ErrorCode: 207, ErrorRemark: "something this version does not know"}},
	} {
		t.Run(refusal.name, func(t *testing.T) {
			t.Parallel()
			db := testenv.MySQL(t)
			if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
				t.Fatal(err)
			}
			broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(broker.Close)
			rmq, err := NewPublisher(Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rmq.Close() })
			var clockMu sync.Mutex
			now := time.Now()
			rmq.now = func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return now }
			ctx := context.Background()
			// One send learns the topic's queues; then one batch of two keys of a queue is refused.
			if err := rmq.Send(ctx, message.Route{}, &message.Message{MsgID: "warm", Topic: "keyed", ShardingKey: "k0", Body: []byte("w")}); err != nil {
				t.Fatal(err)
			}
			q0, _ := rmq.QueueOf("keyed", "k0")
			other := ""
			for n := 1; other == ""; n++ {
				if q, _ := rmq.QueueOf("keyed", fmt.Sprint("k", n)); q == q0 {
					other = fmt.Sprint("k", n)
				}
			}
			broker.SetTopicFaults("keyed", refusal.faults)
			err = rmq.Send(ctx, message.Route{}, &message.Message{MsgID: "r0", Topic: "keyed", ShardingKey: "k0", Body: []byte("r")},
				&message.Message{MsgID: "r1", Topic: "keyed", ShardingKey: other, Body: []byte("r")})
			if k := message.KindOf(err); err == nil || (k != message.SendRefused && k != message.SendMisconfigured) {
				t.Fatalf("the keyed batch: %v (kind %v), want a refusal", err, k)
			}
			broker.ClearFaults() // the grant lands
			if _, ok := rmq.QueueOf("keyed", "k0"); ok {
				t.Fatal("keyed batches go on at once after a refusal: want a pause")
			}
			clockMu.Lock()
			now = now.Add(keyedPauseMax)
			clockMu.Unlock()

			pub := &requestCounter{Publisher: rmq}
			r, err := relay.New(db.DB, nil, pub, relay.Config{})
			if err != nil {
				t.Fatal(err)
			}
			w, err := outbox.NewWriter(outbox.Config{})
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			msgs := make([]outbox.Message, n)
			for i := range msgs {
				msgs[i] = outbox.Message{MsgID: fmt.Sprintf("m%03d", i), Topic: "keyed", ShardingKey: fmt.Sprintf("SN-%03d", i), Body: []byte("keyed")}
			}
			if err := w.InsertNoTx(ctx, db.DB, msgs); err != nil {
				t.Fatal(err)
			}
			for pass := 0; pass < 5; pass++ {
				if _, err := r.DrainOnce(ctx); err != nil {
					t.Fatal(err)
				}
			}
			var sent int
			if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE status = 2").Scan(&sent); err != nil {
				t.Fatal(err)
			}
			copies := map[string]int{}
			for _, m := range broker.Messages("keyed") {
				copies[m.Properties[outbox.MsgIDProperty]]++
			}
			for _, m := range msgs {
				if copies[m.MsgID] != 1 {
					t.Fatalf("%s: %d copies on the broker, want 1 (%d of %d rows sent)", m.MsgID, copies[m.MsgID], sent, n)
				}
			}
			t.Logf("%d rows of %d keys sent in %d requests", n, n, pub.requests.Load())
			if got := pub.requests.Load(); sent != n || got > n/10 {
				t.Fatalf("%d of %d rows sent in %d requests: want every row, in batches of the keys of a queue (at most %d requests)", sent, n, got, n/10)
			}
		})
	}
}
