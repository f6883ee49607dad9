// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/schema"
)

// handover is one measured change of leader.
type handover struct {
	how      string
	at       time.Time     // the signal
	gap      time.Duration // signal → first message stored by another relay
	maxLatMS float64       // worst commit → store of the rows committed during the gap
}

// runFailover measures, with outbox-relay's default settings (poll interval, lock TTL,
// nudges), the delivery gap when the leader is killed with kill -9 and when it is stopped
// with SIGTERM, writers running throughout.
func runFailover(ctx context.Context, args []string) error {
	var s serverFlags
	var wf loadgen.Mix
	fs := flag.NewFlagSet("failover", flag.ContinueOnError)
	s.register(fs)
	registerMix(fs, &wf, 100)
	rounds := fs.Int("rounds", 3, "handovers measured of each kind")
	relayBin := fs.String("relay-bin", "", "outbox-relay binary (default: built from this checkout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := wf.Validate(); err != nil {
		return err
	}
	if *rounds < 1 {
		return fmt.Errorf("--rounds: must be at least 1, got %d", *rounds)
	}
	bin, _, cleanup, err := scratch(ctx, *relayBin)
	if err != nil {
		return err
	}
	defer cleanup()
	w, err := newWorld(ctx, s)
	if err != nil {
		return err
	}
	defer w.Close()

	table := "lm_failover"
	topic := "failover"
	wr, a, err := w.nudgingApp(ctx, table, topic)
	if err != nil {
		return err
	}
	gen := 0
	procs := map[string]*proc{}
	defer func() {
		for _, p := range procs {
			p.stop(10 * time.Second)
		}
	}()
	start := func() error {
		p, err := startRelay(relaySpec{algo: algoRelay, relayBin: bin, dsn: w.dsnVia(w.cfg.Addr), table: table,
			redisAddr: w.rdb.Options().Addr, lockKey: w.prefix + "lock:" + table, nameSrv: w.broker.NameServerAddr(),
			group: fmt.Sprintf("relay-%d", gen), defaults: true})
		if err != nil {
			return err
		}
		procs[p.group] = p
		gen++
		return nil
	}
	if err := start(); err != nil {
		return err
	}
	if err := wr.InsertNoTx(ctx, w.db, []outbox.Message{{MsgID: "warm-up", Topic: topic, Body: []byte("{}")}}); err != nil {
		return err
	}
	if err := waitStored(ctx, w.broker, topic, 1, 60*time.Second); err != nil {
		return err
	}
	if err := start(); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the standby connects

	fmt.Printf("relaybench failover: outbox-relay with default settings (%s), two processes, %d writers at %.0f tx/s with nudges\n",
		bin, wf.Writers, wf.Rate)
	l := loadgen.NewLedger()
	wctx, stopWriters := context.WithCancel(ctx)
	writeErr := make(chan error, 1)
	go func() { writeErr <- a.Write(wctx, wf, l, "") }()
	time.Sleep(2 * time.Second)

	var results []handover
	for _, how := range []string{"kill -9", "SIGTERM"} {
		for i := 0; i < *rounds && ctx.Err() == nil; i++ {
			h, err := measureHandover(ctx, w.broker, topic, procs, how)
			if err != nil {
				stopWriters()
				return err
			}
			fmt.Printf("%-8s round %d: gap %s\n", how, i+1, h.gap.Round(time.Millisecond))
			results = append(results, h)
			if err := start(); err != nil { // a new standby
				stopWriters()
				return err
			}
			time.Sleep(3 * time.Second)
		}
	}
	stopWriters()
	if err := <-writeErr; err != nil {
		return err
	}
	if err := waitStored(ctx, w.broker, topic, l.Commits()+1, 60*time.Second); err != nil {
		return err
	}
	var res loadResult
	msgs := w.broker.Messages(topic)
	measure(msgs, l, &res)
	for i := range results {
		results[i].maxLatMS = worstLatency(msgs, l, results[i].at, results[i].at.Add(results[i].gap))
	}
	fmt.Printf("\n%d committed rows, %d delivered, %d duplicates, %d from rolled-back transactions\n",
		res.committed, res.delivered, res.duplicates, res.fromRolledBack)
	fmt.Println("\n| handover | gaps (ms) | worst commit → ack in the gap (ms) |")
	fmt.Println("|---|---|---|")
	for _, how := range []string{"kill -9", "SIGTERM"} {
		var gaps, lats []string
		for _, h := range results {
			if h.how == how {
				gaps = append(gaps, fmt.Sprint(h.gap.Milliseconds()))
				lats = append(lats, fmt.Sprintf("%.0f", h.maxLatMS))
			}
		}
		fmt.Printf("| %s | %v | %v |\n", how, gaps, lats)
	}
	if res.delivered != res.committed || res.fromRolledBack > 0 {
		return errors.New("not every committed row was delivered exactly from committed transactions")
	}
	return nil
}

// measureHandover signals the current leader (the publisher of the latest message) and
// waits for another relay to store a message.
func measureHandover(ctx context.Context, b *rmqtest.Server, topic string, procs map[string]*proc, how string) (handover, error) {
	h := handover{how: how}
	msgs := b.Messages(topic)
	if len(msgs) == 0 {
		return h, errors.New("no message stored yet")
	}
	last := slices.MaxFunc(msgs, func(x, y rmqtest.Message) int { return int(x.CommitLogOffset - y.CommitLogOffset) })
	leader := procs[last.ProducerGroup]
	if leader == nil || leader.exited() {
		return h, fmt.Errorf("the leader %s is not a running process", last.ProducerGroup)
	}
	sig := syscall.SIGKILL
	if how == "SIGTERM" {
		sig = syscall.SIGTERM
	}
	at := time.Now()
	if err := leader.cmd.Process.Signal(sig); err != nil {
		return h, err
	}
	deadline := time.After(60 * time.Second)
	for {
		first := int64(-1)
		for _, m := range b.Messages(topic) {
			if m.ProducerGroup != leader.group && m.StoreTimestamp >= at.UnixMilli() && (first < 0 || m.StoreTimestamp < first) {
				first = m.StoreTimestamp
			}
		}
		if first >= 0 {
			h.at, h.gap = at, time.UnixMilli(first).Sub(at)
			break
		}
		select {
		case <-ctx.Done():
			return h, ctx.Err()
		case <-deadline:
			return h, fmt.Errorf("%s: no other relay published within 60s", how)
		case <-time.After(20 * time.Millisecond):
		}
	}
	select {
	case <-leader.done:
	case <-time.After(30 * time.Second):
		return h, fmt.Errorf("%s: the old leader did not exit", how)
	}
	delete(procs, leader.group)
	return h, nil
}

// worstLatency is the worst commit → first store of the rows committed in [from, to].
func worstLatency(msgs []rmqtest.Message, l *loadgen.Ledger, from, to time.Time) float64 {
	stored := firstStores(msgs)
	worst := 0.0
	for id, c := range l.Committed() {
		if s, ok := stored[id]; ok && !c.Before(from) && !c.After(to) {
			worst = max(worst, float64(s)-float64(c.UnixMicro())/1000)
		}
	}
	return worst
}

// nudgingApp migrates table and returns a writer of it that nudges the relays, and the
// order service application writing through it to topic.
func (w *world) nudgingApp(ctx context.Context, table, topic string) (*outbox.Writer, *loadgen.App, error) {
	if err := schema.Migrate(ctx, w.db, table); err != nil {
		return nil, nil, err
	}
	wr, err := outbox.NewWriter(outbox.Config{Table: table, Nudger: redisnudge.New(w.rdb)})
	if err != nil {
		return nil, nil, err
	}
	a, err := loadgen.NewApp(ctx, w.db, wr, topic, true)
	if err != nil {
		return nil, nil, err
	}
	return wr, a, nil
}
