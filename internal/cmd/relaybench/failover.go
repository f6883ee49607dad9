// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
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
	f, err := parseHandoverFlags("failover", args, 3, "handovers measured of each kind", false)
	if err != nil {
		return err
	}
	if f.rounds < 1 {
		return fmt.Errorf("--rounds: must be at least 1, got %d", f.rounds)
	}
	hb, closeBench, err := newHandoverBench(ctx, f, "lm_failover", "failover")
	if err != nil {
		return err
	}
	defer closeBench()
	fo := &failover{handoverBench: hb, procs: map[string]*proc{}}
	defer fo.stopAll()
	if err := fo.startPair(ctx); err != nil {
		return err
	}

	fmt.Printf("relaybench failover: outbox-relay with default settings (%s), two processes, %d writers at %.0f tx/s with nudges\n",
		hb.bin, f.wf.Writers, f.wf.Rate)
	l := loadgen.NewLedger()
	bg := startWriters(ctx, hb.app, f.wf, l)
	time.Sleep(2 * time.Second)
	results, err := fo.handovers(ctx, f.rounds)
	if err != nil {
		bg.stop()
		return err
	}
	msgs, res, err := hb.finish(ctx, bg, l)
	if err != nil {
		return err
	}
	for i := range results {
		results[i].maxLatMS = worstLatency(msgs, l, results[i].at, results[i].at.Add(results[i].gap))
	}
	printHandovers(results)
	if res.delivered != res.committed || res.fromRolledBack > 0 {
		return errors.New("not every committed row was delivered exactly from committed transactions")
	}
	return nil
}

// failover is a failover run: its relay processes by producer group.
type failover struct {
	*handoverBench
	procs map[string]*proc
}

// start starts one more relay.
func (fo *failover) start() error {
	p, err := fo.startRelay()
	if err != nil {
		return err
	}
	fo.procs[p.group] = p
	return nil
}

// stopAll stops every relay still running.
func (fo *failover) stopAll() {
	for _, p := range fo.procs {
		p.stop(10 * time.Second)
	}
}

// startPair starts the leader, sends a row through it, then starts the standby.
func (fo *failover) startPair(ctx context.Context) error {
	if err := fo.start(); err != nil {
		return err
	}
	if err := fo.warmUp(ctx); err != nil {
		return err
	}
	if err := fo.start(); err != nil {
		return err
	}
	time.Sleep(2 * time.Second) // the standby connects
	return nil
}

// handovers measures rounds handovers of each kind, starting a new standby after each.
func (fo *failover) handovers(ctx context.Context, rounds int) ([]handover, error) {
	var results []handover
	for _, how := range []string{"kill -9", "SIGTERM"} {
		for i := 0; i < rounds && ctx.Err() == nil; i++ {
			h, err := measureHandover(ctx, fo.w.broker, fo.topic, fo.procs, how)
			if err != nil {
				return nil, err
			}
			fmt.Printf("%-8s round %d: gap %s\n", how, i+1, h.gap.Round(time.Millisecond))
			results = append(results, h)
			if err := fo.start(); err != nil { // a new standby
				return nil, err
			}
			time.Sleep(3 * time.Second)
		}
	}
	return results, nil
}

// printHandovers prints the table of gaps and worst latencies, per kind of handover.
func printHandovers(results []handover) {
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
}

// measureHandover signals the current leader (the publisher of the latest message) and
// waits for another relay to store a message.
func measureHandover(ctx context.Context, b *rmqtest.Server, topic string, procs map[string]*proc, how string) (handover, error) {
	h := handover{how: how}
	ldr := leaderOf(b, topic)
	if ldr == "" {
		return h, errors.New("no message stored yet")
	}
	leader := procs[ldr]
	if leader == nil || leader.exited() {
		return h, fmt.Errorf("the leader %s is not a running process", ldr)
	}
	sig := syscall.SIGKILL
	if how == "SIGTERM" {
		sig = syscall.SIGTERM
	}
	at := time.Now()
	if err := leader.cmd.Process.Signal(sig); err != nil {
		return h, err
	}
	gap, err := waitOtherPublisher(ctx, b, topic, leader.group, at, how)
	if err != nil {
		return h, err
	}
	h.at, h.gap = at, gap
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
