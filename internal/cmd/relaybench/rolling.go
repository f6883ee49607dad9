// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
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
	"github.com/outbox-relay/outbox-relay/outbox"
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
	var s serverFlags
	var wf loadgen.Mix
	fs := flag.NewFlagSet("rolling", flag.ContinueOnError)
	s.register(fs)
	registerMix(fs, &wf, 100)
	replicas := fs.Int("replicas", 2, "relays (pods) of the surge rollout")
	rounds := fs.Int("rounds", 2, "rollouts of each strategy")
	relayBin := fs.String("relay-bin", "", "outbox-relay binary (default: built from this checkout)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := wf.Validate(); err != nil {
		return err
	}
	if *replicas < 1 || *rounds < 1 {
		return fmt.Errorf("--replicas and --rounds: must be at least 1, got %d and %d", *replicas, *rounds)
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

	table, topic := "lm_rolling", "rolling"
	wr, a, err := w.nudgingApp(ctx, table, topic)
	if err != nil {
		return err
	}
	gen := 0
	procs := map[string]*rollProc{}
	defer func() {
		for _, p := range procs {
			p.stop(30 * time.Second)
		}
	}()
	start := func() (*rollProc, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		p, err := startRelay(relaySpec{algo: algoRelay, relayBin: bin, dsn: w.dsnVia(w.cfg.Addr), table: table,
			redisAddr: w.rdb.Options().Addr, lockKey: w.prefix + "lock:" + table, nameSrv: w.broker.NameServerAddr(),
			group: fmt.Sprintf("relay-%d", gen), defaults: true, extra: []string{"OUTBOX_HTTP_ADDR=" + addr}})
		if err != nil {
			return nil, err
		}
		gen++
		rp := &rollProc{proc: p, addr: addr, started: time.Now()}
		procs[p.group] = rp
		return rp, waitReady(ctx, rp)
	}
	if _, err := start(); err != nil {
		return err
	}
	if err := wr.InsertNoTx(ctx, w.db, []outbox.Message{{MsgID: "warm-up", Topic: topic, Body: []byte("{}")}}); err != nil {
		return err
	}
	if err := waitStored(ctx, w.broker, topic, 1, 60*time.Second); err != nil {
		return err
	}
	for len(procs) < *replicas {
		if _, err := start(); err != nil {
			return err
		}
	}

	fmt.Printf("relaybench rolling: outbox-relay with default settings (%s), %d writers at %.0f tx/s with nudges\n", bin, wf.Writers, wf.Rate)
	l := loadgen.NewLedger()
	wctx, stopWriters := context.WithCancel(ctx)
	writeErr := make(chan error, 1)
	go func() { writeErr <- a.Write(wctx, wf, l, "") }()
	time.Sleep(3 * time.Second)

	var steps []rollStep
	fail := func(err error) error {
		stopWriters()
		<-writeErr
		return err
	}
	for round := 0; round < *rounds && ctx.Err() == nil; round++ {
		// surge: every old relay replaced, one at a time, the new one ready first.
		old := make([]string, 0, len(procs))
		for g := range procs {
			old = append(old, g)
		}
		for len(old) > 0 {
			if _, err := start(); err != nil {
				return fail(err)
			}
			victim := old[0]
			if ldr := leaderOf(w.broker, topic); slices.Contains(old, ldr) {
				victim = ldr
			}
			old = slices.DeleteFunc(old, func(g string) bool { return g == victim })
			st, err := replace(ctx, w.broker, topic, procs, victim, "surge", nil)
			if err != nil {
				return fail(err)
			}
			steps = append(steps, st)
			fmt.Printf("surge    round %d: stopped %s (leader %v): gap %s, exit after %s\n", round+1, victim, st.leader,
				st.gap.Round(time.Millisecond), st.exit.Round(time.Millisecond))
			time.Sleep(2 * time.Second)
		}
	}
	// recreate: one relay only; it stops before its successor starts.
	for len(procs) > 1 {
		var g string
		for k := range procs {
			if k != leaderOf(w.broker, topic) {
				g = k
			}
		}
		procs[g].stop(30 * time.Second)
		delete(procs, g)
	}
	time.Sleep(2 * time.Second)
	for round := 0; round < *rounds && ctx.Err() == nil; round++ {
		var only string
		for g := range procs {
			only = g
		}
		st, err := replace(ctx, w.broker, topic, procs, only, "recreate", func() error { _, err := start(); return err })
		if err != nil {
			return fail(err)
		}
		steps = append(steps, st)
		fmt.Printf("recreate round %d: stopped %s: gap %s, exit after %s\n", round+1, only, st.gap.Round(time.Millisecond), st.exit.Round(time.Millisecond))
		time.Sleep(2 * time.Second)
	}
	stopWriters()
	if err := <-writeErr; err != nil {
		return err
	}
	if err := waitStored(ctx, w.broker, topic, l.Commits()+1, 60*time.Second); err != nil {
		return err
	}
	var res loadResult
	measure(w.broker.Messages(topic), l, &res)
	fmt.Printf("\n%d committed rows, %d delivered, %d duplicates, %d from rolled-back transactions\n",
		res.committed, res.delivered, res.duplicates, res.fromRolledBack)
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
	if res.delivered != res.committed || res.fromRolledBack > 0 {
		return errors.New("not every committed row was delivered exactly from committed transactions")
	}
	if res.duplicates > 0 {
		return fmt.Errorf("%d duplicates: a SIGTERMed leader should write its sends back before its successor takes the lock", res.duplicates)
	}
	return nil
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
	deadline := time.After(60 * time.Second)
	for {
		first := int64(-1)
		for _, m := range b.Messages(topic) {
			if m.ProducerGroup != g && m.StoreTimestamp >= at.UnixMilli() && (first < 0 || m.StoreTimestamp < first) {
				first = m.StoreTimestamp
			}
		}
		if first >= 0 {
			st.gap = time.UnixMilli(first).Sub(at)
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-deadline:
			return st, fmt.Errorf("%s: no other relay published within 60s", strategy)
		case <-time.After(20 * time.Millisecond):
		}
	}
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
