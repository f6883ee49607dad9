// SPDX-License-Identifier: Apache-2.0

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/tcpproxy"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/schema"
)

// loadFlags are the load command's flags.
type loadFlags struct {
	servers  serverFlags
	writers  loadgen.Mix
	polls    []time.Duration
	relays   []int
	algos    []string
	duration time.Duration
	idle     time.Duration
	relayBin string
	// partitions is outbox-relay's relay.partitions (its table is migrated for it); seed
	// 002 ignores it.
	partitions int
	// audits are the audit.enabled values outbox-relay runs with ("off", "on"), set
	// explicitly in each run; auditMinAge is audit.min_age with the audit on.
	audits      []string
	auditMinAge time.Duration
	// repeat runs the whole grid this many times, interleaved.
	repeat int
}

// scenario is one measured configuration.
type scenario struct {
	algo   string
	poll   time.Duration
	nudge  bool
	relays int
	audit  string // "off" or "on": outbox-relay's audit.enabled; "" for the classic relay
}

func (s scenario) String() string {
	n := "poll only"
	if s.nudge {
		n = "nudge"
	}
	if s.audit != "" {
		n += ", audit " + s.audit
	}
	return fmt.Sprintf("%s, poll %s, %s, %d relay(s)", s.algo, s.poll, n, s.relays)
}

// loadResult is one scenario's figures.
type loadResult struct {
	scenario
	committed, rolledBack, delivered int
	fromRolledBack, duplicates       int
	p50, p95, p99, max               float64 // commit → broker store, ms
	rowsPerSec                       float64
	cpuPct                           float64 // relay processes' CPU time / wall time, % of one core
	idleQPS                          float64 // commands the relay processes sent at idle, per second
	queriesPer1k                     float64 // commands the relay processes sent while busy, per 1,000 rows delivered
	recorded                         int     // rows whose positions the stored-position journal holds
	audited                          int     // of those, rows in journal entries the audit finished (audited_time set)
	load1                            float64 // the machine's load average over 1 minute, at the scenario's end
}

// parseLoadFlags reads the load command's flags.
func parseLoadFlags(args []string) (loadFlags, error) {
	var f loadFlags
	var err error
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	f.servers.register(fs)
	registerMix(fs, &f.writers, 200)
	polls := fs.String("polls", "200ms,1s", "relay poll intervals (the classic relay: its schedule), comma-separated")
	relays := fs.String("relays", "1,2", "numbers of relay processes per table, comma-separated")
	algos := fs.String("algos", "outbox-relay,outbox-relay-poll,classic", "what to run: outbox-relay (with nudges), outbox-relay-poll (without), classic (the classic local-message relay)")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "writing time of each scenario")
	fs.DurationVar(&f.idle, "idle", 10*time.Second, "idle time over which the relays' queries/s are counted")
	fs.StringVar(&f.relayBin, "relay-bin", "", "outbox-relay binary (default: built from this checkout)")
	fs.IntVar(&f.partitions, "partitions", 1, "outbox-relay's relay.partitions: the relays of a table share its partitions (the classic relay ignores it)")
	audits := fs.String("audit", "off", "outbox-relay's audit.enabled, set explicitly: off, on, or off,on to run both in turn (the classic relay has none)")
	fs.DurationVar(&f.auditMinAge, "audit-min-age", time.Second, "audit.min_age with the audit on: rows are checked this long after they are sent")
	fs.IntVar(&f.repeat, "repeat", 1, "run the whole grid this many times, interleaved (e.g. --audit off,on --repeat 3: three pairs)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if f.audits, err = parseAudits(*audits); err != nil {
		return f, err
	}
	if f.repeat < 1 || f.auditMinAge <= 0 {
		return f, errors.New("--repeat must be at least 1 and --audit-min-age positive")
	}
	if f.partitions < 1 || f.partitions > schema.MaxPartitions {
		return f, fmt.Errorf("--partitions: must be between 1 and %d, got %d", schema.MaxPartitions, f.partitions)
	}
	if err := f.writers.Validate(); err != nil {
		return f, err
	}
	if f.polls, err = parseDurations("--polls", *polls); err != nil {
		return f, err
	}
	for _, s := range strings.Split(*relays, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return f, fmt.Errorf("--relays: %q is not a positive number", s)
		}
		f.relays = append(f.relays, n)
	}
	for _, a := range strings.Split(*algos, ",") {
		if a = strings.TrimSpace(a); !slices.Contains([]string{"outbox-relay", "outbox-relay-poll", "classic"}, a) {
			return f, fmt.Errorf("--algos: unknown %q (outbox-relay, outbox-relay-poll, classic)", a)
		}
		f.algos = append(f.algos, a)
	}
	if f.duration <= 0 || f.idle < 0 {
		return f, errors.New("--duration must be positive and --idle not negative")
	}
	return f, nil
}

func runLoad(ctx context.Context, args []string) error {
	f, err := parseLoadFlags(args)
	if err != nil {
		return err
	}
	bin, _, cleanup, err := scratch(ctx, f.relayBin)
	if err != nil {
		return err
	}
	defer cleanup()
	f.relayBin = bin
	w, err := newWorld(ctx, f.servers)
	if err != nil {
		return err
	}
	defer w.Close()

	fmt.Printf("relaybench load: %d writers, %.0f tx/s, %.0f%% held open up to %s, %.0f%% rolled back; %s of writing per scenario, idle %s\n",
		f.writers.Writers, f.writers.Rate, 100*f.writers.HoldShare, f.writers.HoldMax, 100*f.writers.RollbackShare, f.duration, f.idle)
	fmt.Printf("database %s on %s, Redis, in-process broker; relays are processes (%s, and the classic local-message relay's algorithm)\n\n",
		w.cfg.DBName, w.cfg.Addr, f.relayBin)
	var results []loadResult
	for _, sc := range f.scenarios() {
		r, err := runScenario(ctx, w, f, sc)
		if err != nil {
			return fmt.Errorf("%s: %w", sc, err)
		}
		results = append(results, r)
		printResult(r)
	}
	fmt.Println()
	printTable(results)
	for _, r := range results {
		if r.delivered != r.committed || r.fromRolledBack > 0 {
			return fmt.Errorf("%s: %d of %d committed rows delivered, %d from rolled-back transactions",
				r.scenario, r.delivered, r.committed, r.fromRolledBack)
		}
	}
	return nil
}

// scenarios lists the runs in order: the grid of polls, relays, algorithms and audit
// settings, repeated, so that the settings compared alternate in time.
func (f loadFlags) scenarios() []scenario {
	var out []scenario
	for range f.repeat {
		for _, poll := range f.polls {
			for _, n := range f.relays {
				for _, a := range f.algos {
					if a == "classic" {
						out = append(out, scenario{algo: algoSeed, poll: poll, relays: n})
						continue
					}
					for _, audit := range f.audits {
						out = append(out, scenario{algo: algoRelay, poll: poll, nudge: a == "outbox-relay", relays: n, audit: audit})
					}
				}
			}
		}
	}
	return out
}

// parseAudits reads --audit: off, on, or both, comma-separated.
func parseAudits(s string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "off" && a != "on" {
			return nil, fmt.Errorf("--audit: %q is neither off nor on", a)
		}
		out = append(out, a)
	}
	return out, nil
}

func parseDurations(flagName, s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%s: %q is not a positive duration", flagName, p)
		}
		out = append(out, d)
	}
	return out, nil
}

// runScenario measures one configuration on tables of its own.
func runScenario(ctx context.Context, w *world, f loadFlags, sc scenario) (loadResult, error) {
	res := loadResult{scenario: sc}
	table := "lm_" + randomHex(4)
	topic := "load_" + table
	parts, extra := 1, auditEnv(sc, f.auditMinAge)
	if sc.algo == algoRelay && f.partitions > 1 {
		parts, extra = f.partitions, append(extra, fmt.Sprintf("OUTBOX_RELAY_PARTITIONS=%d", f.partitions))
	}
	if err := schema.MigratePartitioned(ctx, w.db, table, parts); err != nil {
		return res, err
	}
	// Migrate creates the stored-position journal too: with the audit on the relays append
	// to it, with it off nothing does, so "off" is the relay without a journal's writes.
	defer w.db.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+table+", "+table+"_orders, "+schema.StoredLogTable(table))
	wr, err := outbox.NewWriter(outbox.Config{Table: table, Nudger: redisnudge.New(w.rdb)})
	if err != nil {
		return res, err
	}
	a, err := loadgen.NewApp(ctx, w.db, wr, topic, sc.nudge)
	if err != nil {
		return res, err
	}
	// The relays reach the database through a proxy that counts their commands.
	proxy, err := tcpproxy.Start(w.cfg.Addr)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop(10 * time.Second)
		}
	}()
	if err := startRelays(w, f, sc, table, proxy.Addr(), extra, &procs); err != nil {
		return res, err
	}
	// Warm up: one row through, so every relay is connected and one of them leads.
	if err := warmUp(ctx, w, wr, topic, topic+"-warm-up", 60*time.Second+3*sc.poll); err != nil {
		return res, fmt.Errorf("warm-up: %w\n%s", err, procs[0].out.String())
	}
	time.Sleep(time.Second) // let the standbys connect too
	err = measureScenario(ctx, w, f, scenarioRun{sc: sc, table: table, topic: topic, app: a, proxy: proxy, procs: procs}, &res)
	return res, err
}

// scenarioRun is one scenario's relays at work: its table and topic, the application
// writing, the proxy counting the relays' database commands, and the relay processes.
type scenarioRun struct {
	sc           scenario
	table, topic string
	app          *loadgen.App
	proxy        *tcpproxy.Proxy
	procs        []*proc
}

// measureScenario writes for f.duration, waits for every row to be stored and fills res:
// CPU, rows/s, queries per 1k rows, rows recorded and audited, idle queries/s, latencies.
func measureScenario(ctx context.Context, w *world, f loadFlags, r scenarioRun, res *loadResult) error {
	sc, table, topic, proxy, procs := r.sc, r.table, r.topic, r.proxy, r.procs
	cpu0, q0 := cpuOf(procs), proxy.Commands()
	start := time.Now()
	l := loadgen.NewLedger()
	wctx, cancel := context.WithTimeout(ctx, f.duration)
	err := r.app.Write(wctx, f.writers, l, "")
	cancel()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := waitStored(ctx, w.broker, topic, l.Commits()+1, 60*time.Second+3*sc.poll); err != nil {
		return fmt.Errorf("delivery: %w", err)
	}
	wall := time.Since(start)
	res.cpuPct = 100 * (cpuOf(procs) - cpu0).Seconds() / wall.Seconds()
	busyQueries := proxy.Commands() - q0
	if err := w.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(row_count), 0), COALESCE(SUM(IF(audited_time > 0, row_count, 0)), 0) FROM "+
		schema.StoredLogTable(table)).Scan(&res.recorded, &res.audited); err != nil {
		return fmt.Errorf("count the rows recorded and audited: %w", err)
	}
	res.load1 = loadAverage()

	res.idleQPS = idleQueries(proxy, f.idle, sc.poll)
	lat := measure(w.broker.Messages(topic), l, res)
	res.rowsPerSec = float64(res.delivered) / wall.Seconds()
	res.queriesPer1k = 1000 * float64(busyQueries) / float64(max(1, res.delivered))
	res.p50, res.p95, res.p99, res.max = percentile(lat, 0.50), percentile(lat, 0.95), percentile(lat, 0.99), percentile(lat, 1)
	for _, p := range procs {
		if p.exited() {
			return fmt.Errorf("relay %s exited during the run: %v\n%s", p.group, p.err, p.out.String())
		}
	}
	return nil
}

// auditEnv returns outbox-relay's audit settings for sc: audit.enabled set either way, never
// left to the default, and audit.min_age with the audit on.
func auditEnv(sc scenario, minAge time.Duration) []string {
	switch sc.audit {
	case "on":
		return []string{"OUTBOX_AUDIT_ENABLED=true", "OUTBOX_AUDIT_MIN_AGE=" + minAge.String()}
	case "off":
		return []string{"OUTBOX_AUDIT_ENABLED=false"}
	}
	return nil
}

// loadAverage returns the machine's load average over the last minute (NaN where
// /proc/loadavg cannot be read).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// idleQueries returns the commands per second the relays send over idle once their last
// pass ended (0 when idle is 0).
func idleQueries(proxy *tcpproxy.Proxy, idle, poll time.Duration) float64 {
	if idle <= 0 {
		return 0
	}
	time.Sleep(max(2*poll, time.Second)) // the last pass ends
	c0 := proxy.Commands()
	time.Sleep(idle)
	return float64(proxy.Commands()-c0) / idle.Seconds()
}

// startRelays starts sc.relays processes relaying table, reaching the database through
// proxyAddr, and adds them to procs.
func startRelays(w *world, f loadFlags, sc scenario, table, proxyAddr string, extra []string, procs *[]*proc) error {
	for i := 0; i < sc.relays; i++ {
		p, err := startRelay(relaySpec{algo: sc.algo, relayBin: f.relayBin, dsn: w.dsnVia(proxyAddr), table: table,
			redisAddr: w.rdb.Options().Addr, lockKey: w.prefix + "lock:" + table, nameSrv: w.broker.NameServerAddr(),
			group: fmt.Sprintf("relay-%d", i), poll: sc.poll, nudge: sc.nudge, extra: extra})
		if err != nil {
			return err
		}
		*procs = append(*procs, p)
	}
	return nil
}

func cpuOf(procs []*proc) time.Duration {
	var d time.Duration
	for _, p := range procs {
		d += p.cpu()
	}
	return d
}

// waitStored waits until the broker holds n messages of topic.
func waitStored(ctx context.Context, b *rmqtest.Server, topic string, n int, within time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if _, err := b.WaitMessages(wctx, topic, n); err != nil {
		return fmt.Errorf("%d messages of %s stored after %s, want %d: %w", b.Count(topic), topic, within, n, err)
	}
	return nil
}

// measure matches the broker's messages with the ledger: counts into res and returns the
// commit → store latencies in ms, sorted (the first store of each message; the broker's
// store time has ms resolution).
func measure(msgs []rmqtest.Message, l *loadgen.Ledger, res *loadResult) []float64 {
	committed, rolledBack := l.Committed(), l.RolledBack()
	first := firstStores(msgs)
	for _, m := range msgs {
		id := m.Properties[outbox.MsgIDProperty]
		if rolledBack[id] {
			res.fromRolledBack++
		}
		if _, ok := committed[id]; ok {
			res.duplicates++ // less the first stores, below
		}
	}
	res.committed, res.rolledBack = len(committed), len(rolledBack)
	lat := make([]float64, 0, len(committed))
	for id, at := range committed {
		if stored, ok := first[id]; ok {
			res.delivered++
			lat = append(lat, float64(stored)-float64(at.UnixMicro())/1000)
		}
	}
	res.duplicates -= res.delivered
	slices.Sort(lat)
	return lat
}

// firstStores is the first store time (ms) of each msg_id among msgs.
func firstStores(msgs []rmqtest.Message) map[string]int64 {
	first := map[string]int64{}
	for _, m := range msgs {
		id := m.Properties[outbox.MsgIDProperty]
		if at, ok := first[id]; !ok || m.StoreTimestamp < at {
			first[id] = m.StoreTimestamp
		}
	}
	return first
}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func printResult(r loadResult) {
	fmt.Printf("%-50s committed %d, rolled back %d, delivered %d (dups %d, from rolled back %d); "+
		"p50 %.0f p95 %.0f p99 %.0f max %.0f ms; %.0f rows/s; relay CPU %.1f%%; %.0f queries/1k rows; idle %.1f queries/s; recorded %d, audited %d; load %.1f\n",
		r.scenario, r.committed, r.rolledBack, r.delivered, r.duplicates, r.fromRolledBack,
		r.p50, r.p95, r.p99, r.max, r.rowsPerSec, r.cpuPct, r.queriesPer1k, r.idleQPS, r.recorded, r.audited, r.load1)
}

func printTable(rs []loadResult) {
	fmt.Println("| poll | relays | relay | nudge | audit | p50 ms | p95 ms | p99 ms | max lag ms | rows/s | relay CPU % | queries/1k rows | idle queries/s | recorded | audited | load |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		nudge := "no"
		if r.nudge {
			nudge = "yes"
		}
		fmt.Printf("| %s | %d | %s | %s | %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f | %.0f | %.1f | %d | %d | %.1f |\n",
			r.poll, r.relays, r.algo, nudge, cmp.Or(r.audit, "-"), r.p50, r.p95, r.p99, r.max, r.rowsPerSec, r.cpuPct, r.queriesPer1k, r.idleQPS,
			r.recorded, r.audited, r.load1)
	}
}
