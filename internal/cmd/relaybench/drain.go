// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/drainbench"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// runDrain is `outbox-relay bench` against the in-process broker, in a scratch database.
func runDrain(ctx context.Context, args []string) error {
	var s serverFlags
	o := drainbench.Options{Topic: "outbox_bench"}
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	s.register(fs)
	fs.IntVar(&o.Rows, "rows", 100000, "due rows to fill and relay")
	fs.IntVar(&o.BodyBytes, "body-bytes", 200, "bytes of each message body")
	fs.BoolVar(&o.BatchSend, "batch-send", true, "send messages of one topic in batch requests")
	fs.IntVar(&o.BatchSize, "batch-size", 500, "relay.batch_size")
	fs.IntVar(&o.Concurrency, "concurrency", 16, "relay.concurrency")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	w, err := newWorld(ctx, s)
	if err != nil {
		return err
	}
	defer w.Close()
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{w.broker.NameServerAddr()}, SendTimeout: 3 * time.Second})
	if err != nil {
		return err
	}
	defer pub.Close()
	o.Database = config.RedactDSN(w.cfg.FormatDSN())
	o.Broker = "in-process test broker (outbox-relay bench measures a real one)"
	return drainbench.Run(ctx, w.db, pub, o, os.Stdout)
}
