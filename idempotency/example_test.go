// SPDX-License-Identifier: Apache-2.0

package idempotency_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	"github.com/outbox-relay/outbox-relay/idempotency"
)

// The stock consumer of seed 002 with the SQL store: the dedupe row and the stock
// decrement commit together, so a redelivery of the same event is skipped.
func ExampleSQLGuard_Do() {
	ctx := context.Background()
	db, done := exampleDB() // the consumer's own database: sql.Open("mysql", dsn)
	defer done()
	if _, err := db.Exec("CREATE TABLE time_period (id int PRIMARY KEY, stock int NOT NULL)"); err != nil {
		log.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO time_period VALUES (7, 10)"); err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "venue-stock-reduce"})
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx, db); err != nil { // or a migration of schema.DedupeDDL
		log.Fatal(err)
	}
	// The event's identity: what makes it this event of this order (see the package doc).
	const event = "venue_topic:stock_reduce:SN202409200001"
	for range 2 { // a delivery and its redelivery
		res, err := guard.Do(ctx, db, event, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "UPDATE time_period SET stock = stock - 1 WHERE id = ? AND stock > 0", 7)
			return err
		})
		if err != nil {
			log.Printf("redeliver later: %v", err)
			continue
		}
		fmt.Println(res.Outcome)
	}
	var stock int
	_ = db.QueryRow("SELECT stock FROM time_period WHERE id = 7").Scan(&stock)
	fmt.Println("stock", stock)
	// Output:
	// applied
	// duplicate
	// stock 9
}

// DoTx joins a transaction the caller already has: the dedupe row, the effect and the
// caller's other writes (here an outbox row for the next step) commit together.
func ExampleSQLGuard_DoTx() {
	ctx := context.Background()
	db, done := exampleDB()
	defer done()
	if _, err := db.Exec("CREATE TABLE payments (order_sn varchar(32) PRIMARY KEY, amount int)"); err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "payments"})
	if err != nil {
		log.Fatal(err)
	}
	if err := guard.CreateTable(ctx, db); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		res, err := guard.DoTx(ctx, tx, "orders:paid:SN-7001", func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO payments VALUES (?, ?)", "SN-7001", 99)
			return err
		})
		if err != nil {
			_ = tx.Rollback() // the dedupe row may be in tx: never commit after an error
			log.Printf("redeliver later: %v", err)
			continue
		}
		if err := tx.Commit(); err != nil {
			log.Printf("redeliver later: %v", err)
			continue
		}
		fmt.Println(res.Outcome)
	}
	// Output:
	// applied
	// duplicate
}

// An effect outside a database transaction (an SMS), guarded by Redis.
func ExampleGuard_Do() {
	ctx := context.Background()
	rdb, prefix, done := exampleRedis() // redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer done()
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.NewGuard(store, idempotency.Config{
		Group:     "notify-sms",
		ClaimTTL:  time.Minute, // the SMS gateway times out after 10 s
		Retention: 72 * time.Hour,
	})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		res, err := guard.Do(ctx, "orders:paid:SN202409200001", func(ctx context.Context) error {
			fmt.Println("SMS sent")
			return nil
		})
		if err != nil { // Failed or InProgress: ask the broker to redeliver later
			log.Printf("redeliver later: %v", err)
			continue
		}
		if res.NotRecorded != nil { // sent, but a duplicate may send it again: tell someone
			log.Printf("sent, not recorded: %v", res.NotRecorded)
		}
		fmt.Println(res.Outcome)
	}
	// Output:
	// SMS sent
	// applied
	// duplicate
}

// What to tell the broker for each outcome.
func ExampleOutcome_Ack() {
	for _, o := range []idempotency.Outcome{idempotency.Applied, idempotency.Duplicate, idempotency.InProgress, idempotency.Failed} {
		fmt.Printf("%-11s ack=%v\n", o, o.Ack())
	}
	// Output:
	// applied     ack=true
	// duplicate   ack=true
	// in_progress ack=false
	// failed      ack=false
}
