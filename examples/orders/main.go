// SPDX-License-Identifier: Apache-2.0

// Command orders is the end-to-end demo of outbox-relay (`make demo`): an order service
// writes orders and their outbox messages in one transaction (some rolled back on purpose),
// the relay delivers the messages to RocketMQ, and a stock consumer reduces stock once per
// order through the idempotency guard, although the broker is told to lose some acks so
// that duplicates really arrive. It prints a progress line every second and a summary, and
// exits non-zero if any committed order was not applied exactly once.
//
// By default it starts the in-process test broker of internal/rmqtest; with -nameservers it
// uses a real RocketMQ. With -relay-bin it runs the relay binary as a separate process (as in
// production, a sidecar); without, it runs the relay package in-process.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type options struct {
	mysqlServer string
	database    string
	redisAddr   string
	nameservers string
	relayBin    string
	orders      int
	writers     int
	rollbackPct int
	lostAcks    float64
	timeout     time.Duration
	halfMsgs    bool
}

func main() {
	var o options
	flag.StringVar(&o.mysqlServer, "mysql", envOr("OUTBOX_TEST_MYSQL_DSN", "outbox:outbox@tcp(127.0.0.1:13306)/"), "MySQL server DSN without a database name (default: $OUTBOX_TEST_MYSQL_DSN, else make services' private server)")
	flag.StringVar(&o.database, "database", "outbox_demo", "database to (re)create for the demo")
	flag.StringVar(&o.redisAddr, "redis", envOr("OUTBOX_TEST_REDIS_ADDR", "127.0.0.1:16379"), "Redis address (default: $OUTBOX_TEST_REDIS_ADDR, else make services' private server)")
	flag.StringVar(&o.nameservers, "nameservers", "", "RocketMQ name servers (comma-separated); empty starts the in-process test broker")
	flag.StringVar(&o.relayBin, "relay-bin", "", "outbox-relay binary to run as a sidecar process; empty runs the relay in-process")
	flag.IntVar(&o.orders, "orders", 2000, "orders to place")
	flag.IntVar(&o.writers, "writers", 8, "concurrent order writers")
	flag.IntVar(&o.rollbackPct, "rollback-percent", 10, "share of order transactions rolled back on purpose")
	flag.Float64Var(&o.lostAcks, "lost-acks", 0.02, "share of broker sends whose ack is lost after storing (in-process broker only)")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "give up after this long")
	flag.BoolVar(&o.halfMsgs, "half-messages", false, "write orders on RocketMQ's transactional path (outbox/txmsg: a half before the commit, END_TRANSACTION after), with the relay answering check-backs")
	flag.Parse()
	rlog.SetLogLevel("error")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
	if !ok {
		os.Exit(1)
	}
}

// envOr returns the environment variable key, or def when it is empty.
func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
