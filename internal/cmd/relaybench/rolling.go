// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

// rollStep is one pod replaced during a rolling update.
type rollStep struct {
	strategy string
	leader   bool          // the stopped relay was the one publishing
	gap      time.Duration // signal → first message stored by another relay (leader only)
	exit     time.Duration // signal → the old process exited
	rssKB    int           // the stopped relay's peak RSS (VmHWM)
	cpuPct   float64       // its CPU time over its life, % of one core
}

// runRolling replays what a Kubernetes rolling update does to the relays of a Deployment,
// with processes and the default settings, writers committing throughout:
//   - surge (maxSurge 1, maxUnavailable 0, the chart's default): start a new relay, wait for
//     its /readyz, SIGTERM an old one (the leader first, the worst order), until all are new;
//   - recreate (replicas 1 with maxUnavailable 1, or strategy Recreate): SIGTERM the only
//     relay, wait for it to exit, then start the new one.
//
// It reports the delivery gap of each step that stopped the leader, the time each old
// process took to exit after SIGTERM (what terminationGracePeriodSeconds must cover), the
// relays' peak RSS and CPU, and the duplicates over the whole run.
func runRolling(ctx context.Context, args []string) error {
	f, err := parseHandoverFlags("rolling", args, 2, "rollouts of each strategy", true)
	if err != nil {
		return err
	}
	if f.replicas < 1 || f.rounds < 1 {
		return fmt.Errorf("--replicas and --rounds: must be at least 1, got %d and %d", f.replicas, f.rounds)
	}
	hb, closeBench, err := newHandoverBench(ctx, f, "lm_rolling", "rolling")
	if err != nil {
		return err
	}
	defer closeBench()
	r := &rolling{handoverBench: hb, procs: map[string]*rollProc{}}
	defer r.stopAll()
	if err := r.startFleet(ctx, f.replicas); err != nil {
		return err
	}

	fmt.Printf("relaybench rolling: outbox-relay with default settings (%s), %d writers at %.0f tx/s with nudges\n", hb.bin, f.wf.Writers, f.wf.Rate)
	l := loadgen.NewLedger()
	bg := startWriters(ctx, hb.app, f.wf, l)
	time.Sleep(3 * time.Second)
	steps, err := r.rollouts(ctx, f.rounds)
	if err != nil {
		bg.wait()
		return err
	}
	_, res, err := hb.finish(ctx, bg, l)
	if err != nil {
		return err
	}
	printRollSteps(steps)
	if res.delivered != res.committed || res.fromRolledBack > 0 {
		return errors.New("not every committed row was delivered exactly from committed transactions")
	}
	if res.duplicates > 0 {
		return fmt.Errorf("%d duplicates: a SIGTERMed leader should write its sends back before its successor takes the lock", res.duplicates)
	}
	return nil
}

// rolling is a rolling-update run: its relay processes by producer group.
type rolling struct {
	*handoverBench
	procs map[string]*rollProc
}

// start starts one more relay with an HTTP address and waits for its /readyz.
func (r *rolling) start(ctx context.Context) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	p, err := r.startRelay("OUTBOX_HTTP_ADDR=" + addr)
	if err != nil {
		return err
	}
	rp := &rollProc{proc: p, addr: addr, started: time.Now()}
	r.procs[p.group] = rp
	return waitReady(ctx, rp)
}

// stopAll stops every relay still running.
func (r *rolling) stopAll() {
	for _, p := range r.procs {
		p.stop(30 * time.Second)
	}
}

// startFleet starts the first relay, sends a row through it, then starts the others up to
// replicas.
func (r *rolling) startFleet(ctx context.Context, replicas int) error {
	if err := r.start(ctx); err != nil {
		return err
	}
	if err := r.warmUp(ctx); err != nil {
		return err
	}
	for len(r.procs) < replicas {
		if err := r.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// rollouts runs rounds surge rollouts, shrinks to one relay, then runs rounds recreate
// rollouts, and returns every step.
func (r *rolling) rollouts(ctx context.Context, rounds int) ([]rollStep, error) {
	var steps []rollStep
	for round := 0; round < rounds && ctx.Err() == nil; round++ {
		st, err := r.surge(ctx, round)
		if err != nil {
			return nil, err
		}
		steps = append(steps, st...)
	}
	r.shrinkToOne()
	time.Sleep(2 * time.Second)
	for round := 0; round < rounds && ctx.Err() == nil; round++ {
		st, err := r.recreate(ctx, round)
		if err != nil {
			return nil, err
		}
		steps = append(steps, st)
		time.Sleep(2 * time.Second)
	}
	return steps, nil
}

// surge replaces every old relay, one at a time, the new one ready first, the leader
// first of the old ones.
func (r *rolling) surge(ctx context.Context, round int) ([]rollStep, error) {
	old := make([]string, 0, len(r.procs))
	for g := range r.procs {
		old = append(old, g)
	}
	var steps []rollStep
	for len(old) > 0 {
		if err := r.start(ctx); err != nil {
			return nil, err
		}
		victim := old[0]
		if ldr := leaderOf(r.w.broker, r.topic); slices.Contains(old, ldr) {
			victim = ldr
		}
		old = slices.DeleteFunc(old, func(g string) bool { return g == victim })
		st, err := replace(ctx, r.w.broker, r.topic, r.procs, victim, "surge", nil)
		if err != nil {
			return nil, err
		}
		steps = append(steps, st)
		fmt.Printf("surge    round %d: stopped %s (leader %v): gap %s, exit after %s\n", round+1, victim, st.leader,
			st.gap.Round(time.Millisecond), st.exit.Round(time.Millisecond))
		time.Sleep(2 * time.Second)
	}
	return steps, nil
}

// shrinkToOne stops relays other than the leader until one is left, for the recreate
// strategy (one relay only; it stops before its successor starts).
func (r *rolling) shrinkToOne() {
	for len(r.procs) > 1 {
		var g string
		for k := range r.procs {
			if k != leaderOf(r.w.broker, r.topic) {
				g = k
			}
		}
		r.procs[g].stop(30 * time.Second)
		delete(r.procs, g)
	}
}

// recreate replaces the only relay: SIGTERM, exit, then its successor starts.
func (r *rolling) recreate(ctx context.Context, round int) (rollStep, error) {
	var only string
	for g := range r.procs {
		only = g
	}
	st, err := replace(ctx, r.w.broker, r.topic, r.procs, only, "recreate", func() error { return r.start(ctx) })
	if err != nil {
		return st, err
	}
	fmt.Printf("recreate round %d: stopped %s: gap %s, exit after %s\n", round+1, only, st.gap.Round(time.Millisecond), st.exit.Round(time.Millisecond))
	return st, nil
}

// printRollSteps prints the table of gaps, exit times, peak RSS and CPU per strategy.
func printRollSteps(steps []rollStep) {
	fmt.Println("\n| strategy | leader stopped: delivery gap (ms) | SIGTERM → exit (ms), every step | peak RSS of a relay (MiB) | relay CPU over its life (% of a core) |")
	fmt.Println("|---|---|---|---|---|")
	for _, how := range []string{"surge", "recreate"} {
		var gaps, exits, rss, cpu []string
		for _, st := range steps {
			if st.strategy != how {
				continue
			}
			if st.leader {
				gaps = append(gaps, fmt.Sprint(st.gap.Milliseconds()))
			}
			exits = append(exits, fmt.Sprint(st.exit.Milliseconds()))
			rss = append(rss, fmt.Sprintf("%.0f", float64(st.rssKB)/1024))
			cpu = append(cpu, fmt.Sprintf("%.1f", st.cpuPct))
		}
		fmt.Printf("| %s | %s | %s | %s | %s |\n", how, strings.Join(gaps, " / "), strings.Join(exits, " / "),
			strings.Join(rss, " / "), strings.Join(cpu, " / "))
	}
}

// rollProc is a relay process with its HTTP address.
type rollProc struct {
	*proc
	addr    string
	started time.Time
}

// replace SIGTERMs the relay group g and waits for it to exit; then (recreate) runs
// startNext; if g was the leader it waits for another relay's first message.
func replace(ctx context.Context, b *rmqtest.Server, topic string, procs map[string]*rollProc, g, strategy string, startNext func() error) (rollStep, error) {
	p := procs[g]
	st := rollStep{strategy: strategy, leader: leaderOf(b, topic) == g, rssKB: peakRSS(p.cmd.Process.Pid)}
	cpu := p.cpu()
	at := time.Now()
	st.cpuPct = 100 * cpu.Seconds() / at.Sub(p.started).Seconds()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return st, err
	}
	select {
	case <-p.done:
		st.exit = time.Since(at)
	case <-time.After(60 * time.Second):
		return st, fmt.Errorf("%s: relay %s did not exit within 60s of SIGTERM", strategy, g)
	}
	delete(procs, g)
	if startNext != nil {
		if err := startNext(); err != nil {
			return st, err
		}
	}
	if !st.leader {
		return st, nil
	}
	gap, err := waitOtherPublisher(ctx, b, topic, g, at, strategy)
	st.gap = gap
	return st, err
}

// leaderOf is the producer group of the latest message stored: the relay publishing now.
func leaderOf(b *rmqtest.Server, topic string) string {
	msgs := b.Messages(topic)
	if len(msgs) == 0 {
		return ""
	}
	return slices.MaxFunc(msgs, func(x, y rmqtest.Message) int { return int(x.CommitLogOffset - y.CommitLogOffset) }).ProducerGroup
}

// waitReady polls the relay's /readyz until it answers 200, as a readiness probe would.
func waitReady(ctx context.Context, p *rollProc) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("relay %s exited: %v\n%s", p.group, p.err, p.out.String())
		}
		resp, err := http.Get("http://" + p.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("relay %s not ready within 60s", p.group)
}

// freeAddr is a free 127.0.0.1 port for a relay's http.addr.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// peakRSS is the process's peak resident set (VmHWM, KiB), 0 when unknown.
func peakRSS(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return n
		}
	}
	return 0
}
