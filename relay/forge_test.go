// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestPlainSQLForgedFieldsGoDeadAndNeverReachTheConsumer is issue 23, rows 2 and 11, as a
// plain-SQL writer meets them: rows whose msg_id, msg_keys or sharding_key carry RocketMQ's
// property separators, and a row of a batch with over 64 KiB of properties, end dead with a
// reason naming the field and are never published; the consumer, deduplicating by key
// through the idempotency middleware, then applies order SN-1001's real payment, which the
// forged msg_id would have made it skip as a duplicate.
func TestPlainSQLForgedFieldsGoDeadAndNeverReachTheConsumer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// An adopted table may hold properties in a mediumtext column: room for 70 KB of them.
	for _, stmt := range []string{
		"ALTER TABLE local_message MODIFY properties mediumtext DEFAULT NULL",
		"CREATE TABLE applied (order_sn varchar(64) PRIMARY KEY, body text NOT NULL, n int NOT NULL)",
	} {
		if _, err := b.db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(msgID, topic, tag, body, keys, shardingKey, props string) {
		t.Helper()
		var p any
		if props != "" {
			p = props
		}
		if _, err := b.db.Exec("INSERT INTO local_message (msg_id, topic, tag, content, msg_keys, sharding_key, properties) VALUES (?, ?, ?, ?, ?, ?, ?)",
			msgID, topic, tag, body, keys, shardingKey, p); err != nil {
			t.Fatal(err)
		}
	}
	big, _ := json.Marshal(map[string]string{"blob": strings.Repeat("A", 70_000)})
	forged := map[string]string{ // msg_id -> the field named in its fail_reason
		"idem-k1\x02KEYS\x01SN-1001": "msg_id",
		"forged-delay":               "sharding_key",
		"forged-keys":                "msg_keys",
		"forged-64k":                 "properties",
	}
	insert("idem-k1\x02KEYS\x01SN-1001", "payments", "paid", `{"orderSn":"SN-1001","amount":0}`, "", "", "")
	insert("forged-delay", "payments", "paid", `{"orderSn":"SN-2"}`, "SN-2", "user-7\x02DELAY\x0118", "")
	insert("forged-keys", "payments", "paid", `{"orderSn":"SN-3"}`, "SN-3\x02TAGS\x01refund", "", "")
	// Row 11: one batch of four, the second with 70 KB of properties.
	insert("ok-1", "payments", "paid", `{"orderSn":"SN-11"}`, "SN-11", "", "")
	insert("forged-64k", "payments", "paid", `{"orderSn":"SN-12"}`, "SN-12", "", string(big))
	insert("ok-3", "payments", "paid", `{"orderSn":"SN-13"}`, "SN-13", "", "")
	insert("ok-4", "payments", "paid", `{"orderSn":"SN-14"}`, "SN-14", "", "")

	// The consumer: Redis-guarded, keyed by the message keys (the README's recipe).
	rdb, prefix := testenv.Redis(t)
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix + "idem:"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.NewGuard(store, idempotency.Config{Group: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := rocketmqmw.New(guard, rocketmqmw.Config{}, func(ctx context.Context, msg *primitive.MessageExt) error {
		_, err := b.db.ExecContext(ctx, "INSERT INTO applied VALUES (?, ?, 1) ON DUPLICATE KEY UPDATE n = n + 1", msg.GetKeys(), string(msg.Body))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mw.Close)
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName("billing"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.broker.NameServerAddr()})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance("billing-"+testenv.RandomSuffix(6)),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe("payments", consumer.MessageSelector{}, mw.Consume); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })

	run(t, b.newRelay(t, b.config()))
	eventually(t, 30*time.Second, "every row settled", func() bool { return countWhere(t, b.db.DB, "status IN (0, 1)") == 0 })
	for id, field := range forged {
		var status int
		var reason string
		if err := b.db.QueryRow("SELECT status, COALESCE(fail_reason, '') FROM local_message WHERE msg_id = ?", id).Scan(&status, &reason); err != nil {
			t.Fatal(err)
		}
		if status != int(outbox.StatusDead) || !strings.HasPrefix(reason, field+":") {
			t.Errorf("row %q: status %s, reason %q; want dead with a reason about %s", id, outbox.Status(status), reason, field)
		}
	}
	// The real payment of SN-1001, written by the Writer after the forged row was handled.
	b.insert(t, outbox.Message{MsgID: "pay-SN-1001", Topic: "payments", Tag: "paid", Keys: []string{"SN-1001"}, Body: []byte(`{"orderSn":"SN-1001","amount":4200}`)})
	eventually(t, 30*time.Second, "the real payment sent", func() bool { return countWhere(t, b.db.DB, "msg_id = 'pay-SN-1001' AND status = 2") == 1 })

	want := map[string]string{
		"SN-1001": `{"orderSn":"SN-1001","amount":4200}`,
		"SN-11":   `{"orderSn":"SN-11"}`, "SN-13": `{"orderSn":"SN-13"}`, "SN-14": `{"orderSn":"SN-14"}`,
	}
	applied := func() map[string]string {
		rows, err := b.db.Query("SELECT order_sn, body, n FROM applied")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]string{}
		for rows.Next() {
			var sn, body string
			var n int
			if err := rows.Scan(&sn, &body, &n); err != nil {
				t.Fatal(err)
			}
			got[sn] = body
			if n != 1 {
				got[sn] += " (applied more than once)"
			}
		}
		return got
	}
	testenv.Eventually(t, 30*time.Second, "the consumer to apply the real messages", func() bool { return len(applied()) >= len(want) })
	got := applied()
	for sn, body := range want {
		if got[sn] != body {
			t.Errorf("order %s applied as %q, want %q", sn, got[sn], body)
		}
	}
	for sn := range got {
		if _, ok := want[sn]; !ok {
			t.Errorf("order %q was applied from a forged message: %q", sn, got[sn])
		}
	}
	for _, m := range b.broker.Messages("payments") {
		if m.DelayLevel != 0 || m.Tags != "paid" {
			t.Errorf("the broker stored a message with a planted property: %+v", m.Properties)
		}
	}
	if n := b.broker.Count("payments"); n != len(want) {
		t.Errorf("the broker stored %d messages, want %d (the forged rows unsent)", n, len(want))
	}
}
