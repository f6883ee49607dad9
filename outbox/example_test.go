// SPDX-License-Identifier: Apache-2.0

package outbox_test

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// A service writes its order and the message announcing it in one transaction, then nudges
// the relay after the commit.
func ExampleWriter_Insert() {
	var db *sql.DB // the service's own database, opened with the mysql driver
	if db == nil {
		return // the example shows the calls; it needs a real database to run
	}
	w, err := outbox.NewWriter(outbox.Config{Table: "local_message"})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO orders (order_sn, amount) VALUES (?, ?)", "SN-1001", 99); err != nil {
		panic(err)
	}
	err = w.Insert(ctx, tx, &outbox.Message{
		Topic: "orders",
		Tag:   "created",
		Keys:  []string{"SN-1001"}, // consumers dedupe by the order number
		Body:  []byte(`{"orderSn":"SN-1001","amount":99}`),
	})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	_ = w.Nudge(ctx) // a hint: on error the relay still finds the row at its next poll
}

func ExampleValidateTopic() {
	fmt.Println(outbox.ValidateTopic("order-events"))
	fmt.Println(outbox.ValidateTopic("order events"))
	// Output:
	// <nil>
	// topic "order events" has characters RocketMQ refuses (allowed: letters, digits, _ - % |)
}
