// SPDX-License-Identifier: Apache-2.0

package rocketmqmw_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

// The stock consumer in the default (concurrent) mode: the dedupe row and the stock
// decrement commit together; the redelivered "created" is skipped.
func ExampleNewTx() {
	db, done := exampleDB() // the consumer's database: sql.Open("mysql", dsn)
	defer done()
	nameSrv, stopBroker := exampleBroker("orders", "created", "created") // "created" delivered twice
	defer stopBroker()

	ctx := context.Background()
	_, _ = db.Exec("CREATE TABLE stock (sku varchar(32) PRIMARY KEY, qty int NOT NULL)")
	_, _ = db.Exec("INSERT INTO stock VALUES ('apple', 10)")
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "stock-consumer"})
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	mw, err := rocketmqmw.NewTx(guard, db, rocketmqmw.Config{}, func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
		_, err := tx.ExecContext(ctx, "UPDATE stock SET qty = qty - 1 WHERE sku = 'apple'")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName("stock-consumer"),
		consumer.WithInstance("stock-consumer-1"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Subscribe("orders", consumer.MessageSelector{}, mw.Consume); err != nil {
		log.Fatal(err)
	}
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { mw.Close(); _ = c.Shutdown() }() // Close first: running handlers see ctx.Done

	var qty int
	waitUntil(func() bool { return db.QueryRow("SELECT qty FROM stock").Scan(&qty) == nil && qty < 10 })
	waitUntil(func() bool { return dedupeRows(db) == 1 })
	fmt.Println("stock", qty)
	// Output:
	// stock 9
}

// An orderly consumer guarded by Redis: "created" then "paid" of one order reach the
// handler in order; a failure suspends the queue instead of skipping the message.
func ExampleNew_orderly() {
	rdb, prefix, done := exampleRedis() // redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer done()
	nameSrv, stopBroker := exampleBroker("orders", "created", "paid")
	defer stopBroker()

	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.NewGuard(store, idempotency.Config{Group: "order-mailer"})
	if err != nil {
		log.Fatal(err)
	}
	sent := make(chan string, 10)
	failedOnce := false
	mw, err := rocketmqmw.New(guard, rocketmqmw.Config{OrderlySuspend: 100 * time.Millisecond},
		func(ctx context.Context, msg *primitive.MessageExt) error {
			if msg.GetTags() == "created" && !failedOnce {
				failedOnce = true
				return fmt.Errorf("mail server busy") // retried in place; paid waits
			}
			sent <- msg.GetTags() + " " + msg.GetKeys()
			return nil
		})
	if err != nil {
		log.Fatal(err)
	}
	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName("order-mailer"),
		consumer.WithInstance("order-mailer-1"),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{nameSrv})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumerOrder(true),
		consumer.WithMaxReconsumeTimes(16), // then %DLQ%order-mailer, instead of blocking forever
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Subscribe("orders", consumer.MessageSelector{}, mw.Consume); err != nil {
		log.Fatal(err)
	}
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { mw.Close(); _ = c.Shutdown() }()
	fmt.Println(<-sent)
	fmt.Println(<-sent)
	// Output:
	// created SN-7001
	// paid SN-7001
}

// exampleBroker starts an in-process broker for the examples (in a service: your name
// servers) and sends one message of order SN-7001 per tag, in order, to one queue.
func exampleBroker(topic string, tags ...string) (nameSrv string, stop func()) {
	srv, err := rmqtest.Start(rmqtest.Options{Queues: 1, Logf: func(string, ...any) {}})
	if err != nil {
		log.Fatal(err)
	}
	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{srv.NameServerAddr()})),
		producer.WithInstanceName(fmt.Sprintf("example-%d", time.Now().UnixNano())),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = p.Shutdown() }()
	for _, tag := range tags {
		m := primitive.NewMessage(topic, []byte(`{"orderSn":"SN-7001"}`))
		m.WithTag(tag)
		m.WithKeys([]string{"SN-7001"})
		if _, err := p.SendSync(context.Background(), m); err != nil {
			log.Fatal(err)
		}
	}
	return srv.NameServerAddr(), srv.Close
}

func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			log.Fatal("example timed out")
		}
	}
}

func dedupeRows(db *sql.DB) int {
	var n int
	_ = db.QueryRow("SELECT COUNT(*) FROM outbox_dedupe").Scan(&n)
	return n
}

// Keys can come from the body: seed 002 wraps its payload in a MessageWrapper.
func ExampleKeyFromJSONField() {
	msg := &primitive.MessageExt{}
	msg.Body = []byte(`{"message":{"orderSn":"SN202409200001","timePeriodId":7},"uuid":"9f1c"}`)
	key, err := rocketmqmw.KeyFromJSONField("message.orderSn")(msg)
	fmt.Println(key, err)

	msg.Body = []byte(`{"message":{"timePeriodId":7}}`)
	_, err = rocketmqmw.KeyFromJSONField("message.orderSn")(msg)
	fmt.Println(errors.Is(err, idempotency.ErrNoKey))
	// Output:
	// SN202409200001 <nil>
	// true
}

// The default identity keeps two events of one order apart and a redelivery together.
func ExampleTopicTagIdentity() {
	for _, tag := range []string{"created", "paid", "paid"} {
		msg := &primitive.MessageExt{}
		msg.Topic = "orders"
		msg.WithTag(tag)
		fmt.Println(rocketmqmw.TopicTagIdentity(msg, "SN-7001"))
	}
	// Output:
	// orders:created:SN-7001
	// orders:paid:SN-7001
	// orders:paid:SN-7001
}
