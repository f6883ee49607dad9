package idempotency_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/idempotency"
)

// The stock consumer of seed 002: reduce the stock of a time period once per order. The
// dedupe row and the UPDATE commit together, in the consumer's database.
func ExampleWrapRocketMQTx() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/venue?interpolateParams=true")
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "venue-stock-reduce"})
	if err != nil {
		log.Fatal(err)
	}
	consume, err := idempotency.WrapRocketMQTx(guard, db, idempotency.RocketMQConfig{
		Key: idempotency.KeyFromJSONField("orderSn"),
	}, func(ctx context.Context, tx *sql.Tx, msg *primitive.MessageExt) error {
		var body struct {
			TimePeriodID int64 `json:"timePeriodId"`
		}
		if err := json.Unmarshal(msg.Body, &body); err != nil {
			return fmt.Errorf("decode stock reduction: %w", err)
		}
		_, err := tx.ExecContext(ctx, "UPDATE time_period SET stock = stock - 1 WHERE id = ? AND stock > 0", body.TimePeriodID)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}

	c, err := rocketmq.NewPushConsumer(
		consumer.WithGroupName("venue-stock-reduce"),
		consumer.WithNameServer([]string{"127.0.0.1:9876"}),
	)
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Subscribe("venue_topic", consumer.MessageSelector{Type: consumer.TAG, Expression: "time_period_stock_reduce"}, consume); err != nil {
		log.Fatal(err)
	}
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
}

// An effect outside a database transaction, guarded by Redis.
func ExampleGuard_Do() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	store, err := idempotency.NewRedisStore(rdb, idempotency.RedisConfig{KeyPrefix: "venue:idem:"})
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
	out, err := guard.Do(ctx, "SN202409200001", func(ctx context.Context) error {
		return nil // send the SMS
	})
	switch {
	case out == idempotency.Applied && err != nil:
		log.Printf("sent, but not recorded: %v", err) // acknowledge anyway
	case out.Ack():
		// acknowledge
	default:
		// InProgress or Failed: ask the broker to redeliver later
	}
}

// Keys can come from the body: seed 002 wraps its payload in a MessageWrapper.
func ExampleKeyFromJSONField() {
	msg := &primitive.MessageExt{}
	msg.Body = []byte(`{"message":{"orderSn":"SN202409200001","timePeriodId":7},"uuid":"9f1c"}`)
	key, err := idempotency.KeyFromJSONField("message.orderSn")(msg)
	fmt.Println(key, err)

	msg.Body = []byte(`{"message":{"timePeriodId":7}}`)
	_, err = idempotency.KeyFromJSONField("message.orderSn")(msg)
	fmt.Println(errors.Is(err, idempotency.ErrNoKey))
	// Output:
	// SN202409200001 <nil>
	// true
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
