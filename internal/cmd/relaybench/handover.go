// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// handoverFlags are the flags of the commands that replace relay processes under load
// (failover, rolling).
type handoverFlags struct {
	s        serverFlags
	wf       loadgen.Mix
	rounds   int
	replicas int // rolling only
	relayBin string
}

// parseHandoverFlags parses the flags of command name; replicas registers --replicas too.
func parseHandoverFlags(name string, args []string, rounds int, roundsUsage string, replicas bool) (handoverFlags, error) {
	var f handoverFlags
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	f.s.register(fs)
	registerMix(fs, &f.wf, 100)
	if replicas {
		fs.IntVar(&f.replicas, "replicas", 2, "relays (pods) of the surge rollout")
	}
	fs.IntVar(&f.rounds, "rounds", rounds, roundsUsage)
	fs.StringVar(&f.relayBin, "relay-bin", "", "outbox-relay binary (default: built from this checkout)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	return f, f.wf.Validate()
}

// handoverBench is the world of a failover or rolling run: the relay binary, the servers,
// the table and topic, and the order service writing to them with nudges.
type handoverBench struct {
	w     *world
	bin   string
	table string
	topic string
	wr    *outbox.Writer
	app   *loadgen.App
	gen   int // the next relay's producer group number
}

// newHandoverBench builds (or takes) the relay binary, opens the world and migrates table;
// close releases them all.
func newHandoverBench(ctx context.Context, f handoverFlags, table, topic string) (hb *handoverBench, close func(), err error) {
	bin, _, cleanup, err := scratch(ctx, f.relayBin)
	if err != nil {
		return nil, nil, err
	}
	w, err := newWorld(ctx, f.s)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	close = func() { w.Close(); cleanup() }
	wr, a, err := w.nudgingApp(ctx, table, topic)
	if err != nil {
		close()
		return nil, nil, err
	}
	return &handoverBench{w: w, bin: bin, table: table, topic: topic, wr: wr, app: a}, close, nil
}

// startRelay starts the next outbox-relay process (group relay-N) with default settings
// and the extra environment.
func (hb *handoverBench) startRelay(extra ...string) (*proc, error) {
	w := hb.w
	p, err := startRelay(relaySpec{algo: algoRelay, relayBin: hb.bin, dsn: w.dsnVia(w.cfg.Addr), table: hb.table,
		redisAddr: w.rdb.Options().Addr, lockKey: w.prefix + "lock:" + hb.table, nameSrv: w.broker.NameServerAddr(),
		group: fmt.Sprintf("relay-%d", hb.gen), defaults: true, extra: extra})
	if err != nil {
		return nil, err
	}
	hb.gen++
	return p, nil
}

// warmUp sends one row through, so that a relay is connected and leads.
func (hb *handoverBench) warmUp(ctx context.Context) error {
	return warmUp(ctx, hb.w, hb.wr, hb.topic, "warm-up", 60*time.Second)
}

// warmUp inserts the row msgID to topic and waits until it is stored.
func warmUp(ctx context.Context, w *world, wr *outbox.Writer, topic, msgID string, within time.Duration) error {
	if err := wr.InsertNoTx(ctx, w.db, []outbox.Message{{MsgID: msgID, Topic: topic, Body: []byte("{}")}}); err != nil {
		return err
	}
	return waitStored(ctx, w.broker, topic, 1, within)
}

// bgWriters are the order service's writers running in the background.
type bgWriters struct {
	stop context.CancelFunc
	errc chan error
}

// startWriters runs the mix wf of app in the background, recording into l.
func startWriters(ctx context.Context, app *loadgen.App, wf loadgen.Mix, l *loadgen.Ledger) *bgWriters {
	wctx, stop := context.WithCancel(ctx)
	bg := &bgWriters{stop: stop, errc: make(chan error, 1)}
	go func() { bg.errc <- app.Write(wctx, wf, l, "") }()
	return bg
}

// wait stops the writers and returns their error.
func (bg *bgWriters) wait() error {
	bg.stop()
	return <-bg.errc
}

// finish stops the writers, waits until every committed row (and the warm-up) is stored,
// and prints the delivery counts; it returns the stored messages and the counts.
func (hb *handoverBench) finish(ctx context.Context, bg *bgWriters, l *loadgen.Ledger) ([]rmqtest.Message, loadResult, error) {
	var res loadResult
	if err := bg.wait(); err != nil {
		return nil, res, err
	}
	if err := waitStored(ctx, hb.w.broker, hb.topic, l.Commits()+1, 60*time.Second); err != nil {
		return nil, res, err
	}
	msgs := hb.w.broker.Messages(hb.topic)
	measure(msgs, l, &res)
	fmt.Printf("\n%d committed rows, %d delivered, %d duplicates, %d from rolled-back transactions\n",
		res.committed, res.delivered, res.duplicates, res.fromRolledBack)
	return msgs, res, nil
}

// waitOtherPublisher waits until a relay other than group stores a message at or after at,
// and returns how long after at the first such message was stored.
func waitOtherPublisher(ctx context.Context, b *rmqtest.Server, topic, group string, at time.Time, what string) (time.Duration, error) {
	deadline := time.After(60 * time.Second)
	for {
		first := int64(-1)
		for _, m := range b.Messages(topic) {
			if m.ProducerGroup != group && m.StoreTimestamp >= at.UnixMilli() && (first < 0 || m.StoreTimestamp < first) {
				first = m.StoreTimestamp
			}
		}
		if first >= 0 {
			return time.UnixMilli(first).Sub(at), nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-deadline:
			return 0, fmt.Errorf("%s: no other relay published within 60s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
