// SPDX-License-Identifier: Apache-2.0

package rmqtest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

// A test starts the server, points the real client at its name server and asserts on
// what the broker stored.
func ExampleStart() {
	rlog.SetLogLevel("error")
	srv, err := rmqtest.Start(rmqtest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	p, err := producer.NewDefaultProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{srv.NameServerAddr()})),
		producer.WithInstanceName("example"), // one per server: the client shares connections by instance
	)
	if err != nil {
		panic(err)
	}
	if err := p.Start(); err != nil {
		panic(err)
	}
	defer func() { _ = p.Shutdown() }()

	msg := primitive.NewMessage("OrderCreated", []byte(`{"order":42}`))
	msg.WithTag("created")
	msg.WithKeys([]string{"order-42"})
	// SendSync ignores producer.WithSendMsgTimeout: bound it with the context.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, msg); err != nil {
		panic(err)
	}

	stored, err := srv.WaitMessages(ctx, "OrderCreated", 1)
	if err != nil {
		panic(err)
	}
	fmt.Println(stored[0].Tags, stored[0].Keys, string(stored[0].Body))
	// Output: created [order-42] {"order":42}
}
