// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/drainbench"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// partitionsResult is one relay count's measures.
type partitionsResult struct {
	relays        int
	rowsPerSec    float64       // rows / (last sent_time - first sent_time)
	cpu           time.Duration // the relay processes' CPU during the drain
	idleCmds      float64       // Redis commands/s with the relays idle: lock and group upkeep
	killTakeover  time.Duration // kill -9 of one relay until the others own every partition
	joinTakeover  time.Duration // a relay started until every partition is owned once, shares even
	leaveTakeover time.Duration // SIGTERM of one relay until the others own every partition, shares even
}

// runPartitions measures a relay group on one table split into partitions: the drain rate
// of a backlog with 1, 2, 3... relay processes, the Redis commands the group spends when
// idle, the time until the survivors own every partition after a kill -9, and the time a
// joining relay takes to get its share; and the classic relay, alone, on the same backlog.
func runPartitions(ctx context.Context, args []string) error {
	var s serverFlags
	fs := flag.NewFlagSet("partitions", flag.ContinueOnError)
	s.register(fs)
	rows := fs.Int("rows", 100000, "due rows in the backlog of each run")
	parts := fs.Int("partitions", 8, "relay.partitions")
	relaysFlag := fs.String("relays", "1,2,3", "relay process counts to measure, comma-separated")
	seed := fs.Bool("classic", true, "also drain the same backlog with the classic local-message relay")
	idle := fs.Duration("idle", 10*time.Second, "idle window over which Redis commands are counted")
	relayBin := fs.String("relay-bin", "", "outbox-relay binary (default: built from this checkout)")
	ownRedis := fs.Bool("own-redis", true, "run a private redis-server for the run, so that its command count is the group's alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	counts, err := parseRelayCounts(*relaysFlag)
	if err != nil {
		return err
	}
	if *parts < 1 || *parts > schema.MaxPartitions {
		return fmt.Errorf("--partitions: must be between 1 and %d, got %d", schema.MaxPartitions, *parts)
	}
	bin, w, closeWorld, err := partitionsWorld(ctx, s, *relayBin, *ownRedis)
	if err != nil {
		return err
	}
	defer closeWorld()

	// The baseline: one relay on an unpartitioned table, as before partitions.
	base, err := measurePartitions(ctx, w, bin, 1, 1, *rows, *idle)
	if err != nil {
		return err
	}
	fmt.Printf("baseline, one relay, relay.partitions=1: %.0f rows/s, idle Redis %.1f commands/s\n", base.rowsPerSec, base.idleCmds)
	var results []partitionsResult
	for _, n := range counts {
		r, err := measurePartitions(ctx, w, bin, n, *parts, *rows, *idle)
		if err != nil {
			return err
		}
		results = append(results, r)
		fmt.Printf("relays=%d: %.0f rows/s, relay CPU %.1fs, idle Redis %.1f commands/s, takeover after kill -9 %s, join %s, SIGTERM %s\n",
			n, r.rowsPerSec, r.cpu.Seconds(), r.idleCmds, orDash(r.killTakeover), orDash(r.joinTakeover), orDash(r.leaveTakeover))
	}
	var seedRate float64
	if *seed {
		if seedRate, err = measureSeedDrain(ctx, w, *rows); err != nil {
			return err
		}
	}
	printPartitions(*rows, *parts, w.cfg.Addr, base, results, *seed, seedRate)
	return nil
}

// partitionsWorld builds (or takes) the relay binary and opens the world, with a private
// redis-server when ownRedis; close releases them all.
func partitionsWorld(ctx context.Context, s serverFlags, relayBin string, ownRedis bool) (bin string, w *world, close func(), err error) {
	bin, tmp, cleanup, err := scratch(ctx, relayBin)
	if err != nil {
		return "", nil, nil, err
	}
	stopRedis := func() {}
	if ownRedis {
		addr, stop, err := startRedis(ctx, tmp)
		if err != nil {
			cleanup()
			return "", nil, nil, err
		}
		stopRedis = stop
		s.redisAddr = addr
	}
	w, err = newWorld(ctx, s)
	if err != nil {
		stopRedis()
		cleanup()
		return "", nil, nil, err
	}
	return bin, w, func() { w.Close(); stopRedis(); cleanup() }, nil
}

// parseRelayCounts parses --relays: relay counts, comma-separated, each at least 1.
func parseRelayCounts(list string) ([]int, error) {
	var counts []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--relays: %q is not a relay count", f)
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// printPartitions prints the table of the baseline, each relay count and, with classic,
// the classic relay's drain rate, each against the first relay count's rate.
func printPartitions(rows, parts int, dbAddr string, base partitionsResult, results []partitionsResult, classic bool, seedRate float64) {
	fmt.Printf("\n%d rows, relay.partitions=%d, lock TTL 2s, in-process broker; %s\n\n", rows, parts, dbAddr)
	fmt.Println("| relays | rows/s | vs 1 relay | relay CPU s | idle Redis cmds/s | takeover after kill -9 | join until even | SIGTERM until even |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	fmt.Printf("| 1, relay.partitions=1 | %.0f | %.2f× | %.1f | %.1f | | | |\n", base.rowsPerSec, base.rowsPerSec/results[0].rowsPerSec, base.cpu.Seconds(), base.idleCmds)
	for _, r := range results {
		fmt.Printf("| %d | %.0f | %.2f× | %.1f | %.1f | %s | %s | %s |\n", r.relays, r.rowsPerSec, r.rowsPerSec/results[0].rowsPerSec,
			r.cpu.Seconds(), r.idleCmds, orDash(r.killTakeover), orDash(r.joinTakeover), orDash(r.leaveTakeover))
	}
	if classic {
		fmt.Printf("| classic relay (1 relay) | %.0f | %.2f× | | | | | |\n", seedRate, seedRate/results[0].rowsPerSec)
	}
}

// orDash formats d, or "-" when it was not measured.
func orDash(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

// measurePartitions drains a backlog of rows with n relay processes sharing parts partitions.
func measurePartitions(ctx context.Context, w *world, bin string, n, parts, rows int, idle time.Duration) (partitionsResult, error) {
	res := partitionsResult{relays: n}
	g := &partGroup{w: w, bin: bin, table: fmt.Sprintf("lm_part_%d_of_%d", n, parts), parts: parts}
	if err := schema.MigratePartitioned(ctx, w.db, g.table, parts); err != nil {
		return res, err
	}
	if err := drainbench.Fill(ctx, w.db, g.table, drainbench.Options{Rows: rows, BodyBytes: 200, Topic: "partitions"}); err != nil {
		return res, err
	}
	defer g.stopAll()
	for i := 0; i < n; i++ {
		if _, err := g.start(i); err != nil {
			return res, err
		}
	}
	var err error
	if res.rowsPerSec, res.cpu, err = g.drain(ctx, rows); err != nil {
		return res, err
	}
	if res.idleCmds, err = idleRedisCommands(ctx, w, idle); err != nil {
		return res, err
	}
	if n < 2 {
		return res, nil
	}
	err = g.takeovers(ctx, &res)
	return res, err
}

// partGroup is a group of relay processes sharing the partitions of one table.
type partGroup struct {
	w     *world
	bin   string
	table string
	parts int
	procs []*proc // every process started, stopped at the end
}

// start starts relay i of the group.
func (g *partGroup) start(i int) (*proc, error) {
	w := g.w
	p, err := startRelay(relaySpec{algo: algoRelay, relayBin: g.bin, dsn: w.cfg.FormatDSN(), table: g.table,
		redisAddr: w.rdb.Options().Addr, lockKey: w.prefix + "lock:" + g.table, nameSrv: w.broker.NameServerAddr(),
		group: fmt.Sprintf("relay-%d", i), defaults: true, extra: []string{"OUTBOX_RELAY_PARTITIONS=" + strconv.Itoa(g.parts)}})
	if err != nil {
		return nil, err
	}
	g.procs = append(g.procs, p)
	return p, nil
}

// stopAll stops every relay of the group.
func (g *partGroup) stopAll() {
	for _, p := range g.procs {
		p.stop(10 * time.Second)
	}
}

// drain waits until all rows are sent and returns the rate, rows over the span of their
// sent_time, and the relays' CPU time until then.
func (g *partGroup) drain(ctx context.Context, rows int) (float64, time.Duration, error) {
	if err := pollUntil(ctx, 10*time.Minute, 100*time.Millisecond, "every row sent", func() (bool, error) {
		var sent int
		err := g.w.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+g.table+" WHERE status = 2").Scan(&sent)
		return sent == rows, err
	}); err != nil {
		return 0, 0, err
	}
	cpu := cpuOf(g.procs)
	var first, last int64
	if err := g.w.db.QueryRowContext(ctx, "SELECT MIN(sent_time), MAX(sent_time) FROM "+g.table).Scan(&first, &last); err != nil {
		return 0, 0, err
	}
	return float64(rows) / (float64(max(last-first, 1)) / 1000), cpu, nil
}

// idleRedisCommands is the Redis commands/s over idle, after 2s of settling: every command
// in the window is the group's (the bench runs alone).
func idleRedisCommands(ctx context.Context, w *world, idle time.Duration) (float64, error) {
	time.Sleep(2 * time.Second)
	before, err := redisCommands(ctx, w)
	if err != nil {
		return 0, err
	}
	time.Sleep(idle)
	after, err := redisCommands(ctx, w)
	if err != nil {
		return 0, err
	}
	// Commands run by scripts count as well as the EVALSHA: an extension is 3 (EVALSHA, GET,
	// PEXPIRE), a heartbeat 5. The INFO itself counts once.
	return float64(after-before-1) / idle.Seconds(), nil
}

// takeovers measures, on the group of res.relays relays, the time until the partitions are
// evenly owned again after a kill -9, a join and a SIGTERM, in that order.
func (g *partGroup) takeovers(ctx context.Context, res *partitionsResult) error {
	procs := g.procs
	if err := g.waitEven(ctx, procs, "even shares"); err != nil {
		return err
	}
	// A relay killed with -9: until the survivors own every partition exactly once.
	killed := time.Now()
	_ = procs[0].cmd.Process.Signal(syscall.SIGKILL)
	<-procs[0].done
	survivors := procs[1:]
	if err := g.waitEven(ctx, survivors, "survivors owning every partition"); err != nil {
		return err
	}
	res.killTakeover = time.Since(killed)
	// A relay joins: until every partition is owned once with even shares again.
	joined := time.Now()
	p, err := g.start(res.relays)
	if err != nil {
		return err
	}
	all := append(survivors[:len(survivors):len(survivors)], p)
	if err := g.waitEven(ctx, all, "even shares after a join"); err != nil {
		return err
	}
	res.joinTakeover = time.Since(joined)
	// A relay stopped with SIGTERM: it hands its partitions over and leaves the group.
	left := time.Now()
	_ = all[0].cmd.Process.Signal(syscall.SIGTERM)
	if err := g.waitEven(ctx, all[1:], "even shares after a leave"); err != nil {
		return err
	}
	res.leaveTakeover = time.Since(left)
	return nil
}

// waitEven waits up to a minute until procs own every partition once, in even shares.
func (g *partGroup) waitEven(ctx context.Context, procs []*proc, what string) error {
	return pollUntil(ctx, time.Minute, 10*time.Millisecond, what, func() (bool, error) {
		return evenlyOwned(procs, g.parts), nil
	})
}

// measureSeedDrain drains rows with the classic relay (one process, its 1s job) and returns
// its rate.
func measureSeedDrain(ctx context.Context, w *world, rows int) (float64, error) {
	table := "lm_part_seed"
	if err := schema.Migrate(ctx, w.db, table); err != nil {
		return 0, err
	}
	if err := drainbench.Fill(ctx, w.db, table, drainbench.Options{Rows: rows, BodyBytes: 200, Topic: "partitions"}); err != nil {
		return 0, err
	}
	p, err := startRelay(relaySpec{algo: algoSeed, dsn: w.cfg.FormatDSN(), table: table, redisAddr: w.rdb.Options().Addr,
		lockKey: w.prefix + "lock:" + table, nameSrv: w.broker.NameServerAddr(), group: "classic-relay", poll: time.Second})
	if err != nil {
		return 0, err
	}
	defer p.stop(10 * time.Second)
	// Seed 002 stamps no sent_time: its span is timed from the first row seen sent to the
	// last, polled every 100 ms (under a second of error on a drain of tens of seconds).
	var first, last time.Time
	if err := pollUntil(ctx, 30*time.Minute, 100*time.Millisecond, "the classic relay to send every row", func() (bool, error) {
		var sent int
		err := w.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+" WHERE status = 2").Scan(&sent)
		if sent > 0 && first.IsZero() {
			first = time.Now()
		}
		last = time.Now()
		return sent == rows, err
	}); err != nil {
		return 0, err
	}
	return float64(rows) / max(last.Sub(first).Seconds(), 0.001), nil
}

// startRedis runs redis-server on a free loopback port, without persistence, in dir.
func startRedis(ctx context.Context, dir string) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis-server (or pass --own-redis=false): %w", err)
	}
	stop = func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	if err := pollUntil(ctx, 10*time.Second, 20*time.Millisecond, "redis-server to listen", func() (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	}); err != nil {
		stop()
		return "", nil, err
	}
	return addr, stop, nil
}

// redisCommands is the server's total_commands_processed.
func redisCommands(ctx context.Context, w *world) (int64, error) {
	info, err := w.rdb.Info(ctx, "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO stats has no total_commands_processed")
}

// evenlyOwned reports whether every partition is owned by exactly one of procs, by their
// metrics, with shares that differ by at most one.
func evenlyOwned(procs []*proc, parts int) bool {
	count := map[int]int{}
	for _, p := range procs {
		owned := ownedPartitions(p)
		if len(owned) < parts/len(procs) || len(owned) > parts/len(procs)+1 {
			return false
		}
		for _, o := range owned {
			count[o]++
		}
	}
	if len(count) != parts {
		return false
	}
	for _, c := range count {
		if c != 1 {
			return false
		}
	}
	return true
}

// ownedPartitions reads outbox_relay_partition_owned from p's /metrics.
func ownedPartitions(p *proc) []int {
	return testenv.OwnedPartitions(testenv.Metrics(testenv.LoggedHTTPAddr(p.out.String())))
}

// pollUntil calls cond every interval until it is true, errs, or within passes.
func pollUntil(ctx context.Context, within, interval time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(within)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s", what, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}
