// SPDX-License-Identifier: Apache-2.0

package relay

// Benchmarks of the delivery engine against the real MariaDB and the in-process RocketMQ
// broker (internal/rmqtest). They are not run by `make test`; `make bench` runs them once
// each (-benchtime=1x), and docs/performance.md records their figures and commands.
//
// Every benchmark fills its table outside the timer and times the drain, so b.N only
// repeats the whole measure. Sizes come from the environment:
//
//	OUTBOX_BENCH_ROWS          backlog of BenchmarkDrain (default 100000)
//	OUTBOX_BENCH_BIG_ROWS      large backlog of BenchmarkDrainMemory (default 1000000)
//	OUTBOX_BENCH_HISTORY       sent rows under BenchmarkScanTick's due rows (default 1000000)
//	OUTBOX_BENCH_LATENCY_MSGS  rows written by BenchmarkCommitToAck (default 300)
//
// BenchmarkDrainMemory (and BenchmarkCeilings, the layout) also read:
//
//	OUTBOX_BENCH_LAYOUT=previous  the table keeps the (status, update_time) index of the
//	                              contract before issue 21 (benchLayout)
//	OUTBOX_BENCH_BUSY=1           busy writers commit into the drained table throughout
//	                              (benchBusyWriters)
//	OUTBOX_BENCH_KEYS=random      every row filled gets a sharding key of its own, as order
//	                              streams spread over the key index (fillRows); default none
//	OUTBOX_BENCH_ORDERED=1        the drained topic is an ordered route (benchRelay)

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

const (
	benchTable = "local_message"
	benchTopic = "Bench"
)

// benchBody is a typical outbox body: 200 bytes.
var benchBody = strings.Repeat("x", 200)

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func benchDB(tb testing.TB) *testenv.DB {
	tb.Helper()
	rlog.SetLogLevel("error")
	db := testenv.MySQL(tb)
	if err := schema.Migrate(context.Background(), db.DB, benchTable); err != nil {
		tb.Fatal(err)
	}
	return db
}

// fillRows inserts n rows of the given status with multi-row INSERTs of 1,000 rows, the
// fastest way in (51k-74k rows/s on these machines). msg_ids are prefix + a sequence number.
func fillRows(tb testing.TB, db *sql.DB, prefix string, n, status int) {
	tb.Helper()
	const perStmt = 1000
	var q strings.Builder
	args := make([]any, 0, 3*perStmt)
	randomKeys := os.Getenv("OUTBOX_BENCH_KEYS") == "random"
	for done := 0; done < n; {
		k := min(perStmt, n-done)
		q.Reset()
		args = args[:0]
		q.WriteString("INSERT INTO " + benchTable + " (msg_id, topic, tag, content, status, sharding_key) VALUES ")
		for i := 0; i < k; i++ {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, '" + benchTopic + "', 'created', ?, " + strconv.Itoa(status) + ", ?)")
			key := ""
			if randomKeys {
				key = fmt.Sprintf("SN%016x", rand.Uint64())
			}
			args = append(args, prefix+strconv.Itoa(done+i), benchBody, key)
		}
		if _, err := db.Exec(q.String(), args...); err != nil {
			tb.Fatalf("fill %d rows: %v", n, err)
		}
		done += k
	}
}

// benchPublisher returns a publisher on the broker at nameServer, warmed up (route fetched,
// connection open) by one send.
func benchPublisher(tb testing.TB, nameServer string) *rocketmq.Publisher {
	tb.Helper()
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{nameServer}, SendTimeout: 3 * time.Second})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pub.Close() })
	if err := pub.Send(context.Background(), Route{}, &Message{MsgID: "warm-up", Topic: benchTopic, Body: []byte("warm-up")}); err != nil {
		tb.Fatalf("warm-up send: %v", err)
	}
	return pub
}

func benchBroker(tb testing.TB) *rmqtest.Server {
	tb.Helper()
	s, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func benchRelay(tb testing.TB, db *sql.DB, pub Publisher, cfg Config) *Relay {
	tb.Helper()
	if os.Getenv("OUTBOX_BENCH_ORDERED") == "1" && cfg.Router == nil {
		cfg.Router = RouterFunc(func(topic, _ string) (Route, bool) { return Route{Ordered: topic == benchTopic}, true })
	}
	r, err := New(db, nil, pub, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

// drainAll times one DrainOnce over a backlog of n rows and checks every row was sent.
func drainAll(b *testing.B, r *Relay, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	start := time.Now()
	st, err := r.DrainOnce(ctx)
	took := time.Since(start)
	if err != nil {
		b.Fatalf("DrainOnce: %v (%+v)", err, st)
	}
	// Busy writers' rows (benchBusyWriters) may be sent in the same drain.
	if st.Sent < n || (st.Sent > n && os.Getenv("OUTBOX_BENCH_BUSY") != "1") {
		b.Fatalf("DrainOnce sent %d of %d rows: %+v", st.Sent, n, st)
	}
	return took
}

// BenchmarkDrain relays a backlog of OUTBOX_BENCH_ROWS rows to the in-process broker with one
// DrainOnce, across batch sizes, concurrencies and batch send on/off, and, at concurrency 16,
// with seed 002's write-back (one UPDATE per row) next to the set-based one: read the
// msgs/s of writeback=perrow against writeback=set of the same line.
func BenchmarkDrain(b *testing.B) {
	n := envInt(b, "OUTBOX_BENCH_ROWS", 100000)
	for _, batch := range []int{100, 500, 2000} {
		for _, conc := range []int{1, 16} {
			for _, send := range []string{"batch", "single"} {
				for _, wb := range []string{"set", "perrow"} {
					if wb == "perrow" && conc != 16 {
						continue // the write-back does not depend on the send concurrency
					}
					cfg := Config{BatchSize: batch, Concurrency: conc, DisableBatchSend: send == "single", perRowWriteBack: wb == "perrow"}
					name := fmt.Sprintf("batch=%d/conc=%d/send=%s/writeback=%s", batch, conc, send, wb)
					b.Run(name, func(b *testing.B) { benchDrain(b, n, cfg) })
				}
			}
		}
	}
}

func benchDrain(b *testing.B, n int, cfg Config) {
	db := benchDB(b)
	broker := benchBroker(b)
	r := benchRelay(b, db.DB, benchPublisher(b, broker.NameServerAddr()), cfg)
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		fillRows(b, db.DB, fmt.Sprintf("r%d-", i), n, 0)
		runtime.GC()
		before := serverStatus(b, db.DB)
		stopRates := sampleRates(db.DB)
		b.StartTimer()
		total += drainAll(b, r, n)
		b.StopTimer()
		reportQuarters(b, stopRates())
		reportServerWork(b, before, serverStatus(b, db.DB), n)
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
}

// serverCounters are the server-wide counters the benchmarks report per 1,000 rows, to see
// what grows with the table: buffer pool misses (pages read from disk), page requests,
// pages flushed, redo written. They are global: other clients of the server add to them.
var serverCounters = []string{"Innodb_buffer_pool_reads", "Innodb_buffer_pool_read_requests",
	"Innodb_buffer_pool_pages_flushed", "Innodb_os_log_written", "Innodb_buffer_pool_wait_free", "Handler_update"}

// serverStatus reads serverCounters from SHOW GLOBAL STATUS.
func serverStatus(tb testing.TB, db *sql.DB) map[string]float64 {
	tb.Helper()
	rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('" + strings.Join(serverCounters, "', '") + "')")
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	out := map[string]float64{}
	for rows.Next() {
		var name string
		var v float64
		if err := rows.Scan(&name, &v); err != nil {
			tb.Fatal(err)
		}
		out[name] = v
	}
	return out
}

// reportServerWork reports the server's work per 1,000 rows between two serverStatus reads.
func reportServerWork(b *testing.B, before, after map[string]float64, n int) {
	per := func(name string) float64 { return (after[name] - before[name]) * 1000 / float64(n) }
	b.ReportMetric(per("Innodb_buffer_pool_reads"), "bp-miss/krow")
	b.ReportMetric(per("Innodb_buffer_pool_read_requests"), "bp-req/krow")
	b.ReportMetric(per("Innodb_buffer_pool_pages_flushed"), "flushed/krow")
	b.ReportMetric(per("Innodb_os_log_written")/1024, "redo-KB/krow")
	b.ReportMetric(after["Innodb_buffer_pool_wait_free"]-before["Innodb_buffer_pool_wait_free"], "wait-free")
}

// rateSample is the server's Handler_update (rows updated) at a moment of a drain.
type rateSample struct {
	at      time.Time
	updated float64
}

// sampleRates reads Handler_update every 250ms until stopped, so that a drain's rate
// at its start and at its end can be told apart (a slowdown that grows as the drain goes
// on, like a filling redo log, against one that is there from the first page).
func sampleRates(db *sql.DB) (stop func() []rateSample) {
	var out []rateSample
	stopTaking := takeEvery(250*time.Millisecond, func() {
		var name string
		var v float64
		if db.QueryRow("SHOW GLOBAL STATUS LIKE 'Handler_update'").Scan(&name, &v) == nil {
			out = append(out, rateSample{time.Now(), v})
		}
	})
	return func() []rateSample { stopTaking(); return out }
}

// takeEvery calls take at once, then every d, and a last time when stop is called.
func takeEvery(d time.Duration, take func()) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			take()
			select {
			case <-done:
				take()
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// reportQuarters reports the rows updated per second over the first and the last quarter of
// a drain's updates.
func reportQuarters(b *testing.B, s []rateSample) {
	if len(s) < 3 {
		return
	}
	first, last := s[0], s[len(s)-1]
	total := last.updated - first.updated
	if total <= 0 {
		return
	}
	rate := func(from, to float64) float64 {
		var t0, t1 time.Time
		for _, x := range s {
			if t0.IsZero() && x.updated-first.updated >= from*total {
				t0 = x.at
			}
			if t1.IsZero() && x.updated-first.updated >= to*total {
				t1 = x.at
			}
		}
		if d := t1.Sub(t0).Seconds(); d > 0 {
			return (to - from) * total / d
		}
		return 0
	}
	b.ReportMetric(rate(0, 0.25), "first-quarter-rows/s")
	b.ReportMetric(rate(0.75, 1), "last-quarter-rows/s")
}

// BenchmarkCeilings measures what the database alone allows on backlogs of OUTBOX_BENCH_ROWS
// and OUTBOX_BENCH_BIG_ROWS due rows (default 100k and 1M), one client, nothing published:
// "read-rows/s" reads every due row the way the scan does (keyset pages of 500 on the status
// index, bodies included); "update-rows/s" then marks them all sent with the relay's own
// statement (store.markSent: UPDATE ... WHERE id IN (1,000 ids) AND status IN (0, 1) AND
// retry_count = ?, READ COMMITTED, through the primary key), one statement after the other,
// ids ascending as a drain writes them. A drain cannot beat the update: it is the set-based UPDATE ceiling.
// The server's work per 1,000 updated rows is reported as BenchmarkDrain reports it.
func BenchmarkCeilings(b *testing.B) {
	for _, n := range []int{envInt(b, "OUTBOX_BENCH_ROWS", 100000), envInt(b, "OUTBOX_BENCH_BIG_ROWS", 1000000)} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			db := benchDB(b)
			b.Logf("layout %s", benchLayout(b, db.DB))
			r := benchRelay(b, db.DB, nopPublisher{}, Config{})
			ctx := context.Background()
			var readTime, updateTime time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				fillRows(b, db.DB, fmt.Sprintf("c%d-", i), n, 0)
				runtime.GC()
				b.StartTimer()
				start := time.Now()
				var ids []int64
				c := outboxsql.Cursor{Next: -1 << 62}
				for {
					rows, _, _, err := r.eng.ReadPage(ctx, int(outbox.StatusPending), time.Now().UnixMilli(), c, 500, int64(r.cfg.MaxPageBytes))
					if err != nil {
						b.Fatal(err)
					}
					for k := range rows {
						ids = append(ids, rows[k].ID)
					}
					if len(rows) < 500 {
						break
					}
					last := rows[len(rows)-1]
					c = outboxsql.Cursor{Next: last.NextRetry, ID: last.ID}
				}
				readTime += time.Since(start)
				if len(ids) != n {
					b.Fatalf("read %d due rows, want %d", len(ids), n)
				}
				before := serverStatus(b, db.DB)
				start = time.Now()
				changed, err := r.eng.Store().MarkSent(ctx, 0, ids, time.Now().UnixMilli())
				updateTime += time.Since(start)
				if err != nil || changed != int64(n) {
					b.Fatalf("marked %d of %d rows sent: %v", changed, n, err)
				}
				b.StopTimer()
				reportServerWork(b, before, serverStatus(b, db.DB), n)
				b.StartTimer()
			}
			b.ReportMetric(float64(n*b.N)/readTime.Seconds(), "read-rows/s")
			b.ReportMetric(float64(n*b.N)/updateTime.Seconds(), "update-rows/s")
		})
	}
}

// BenchmarkWriteBackByLayout measures the relay's write-back (store.markSent, 1,000 ids a
// statement) on the same rows in four index layouts at once: the contract's before issue 21
// (with (status, update_time) and the ordered check's (sharding_key, status, id)); the one
// before the ordered check moved to (sharding_key, id); the contract's; and without any
// index holding status (the ceiling no index layout can pass).
// Each layout has its own table of OUTBOX_BENCH_ROWS pending rows with 200-byte bodies and
// random sharding keys (order streams); the statements go round-robin over the tables, one
// statement each in turn, so that the load of a shared machine falls on every layout alike.
// It reports rows/s per layout and each against the previous contract.
func BenchmarkWriteBackByLayout(b *testing.B) {
	db := benchDB(b)
	n := envInt(b, "OUTBOX_BENCH_ROWS", 100000)
	layouts := []struct{ name, alter string }{
		{"previous", "ADD INDEX idx_status_update (status, update_time), DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"},
		{"ordered-status", "DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"},
		{"contract", ""},
		{"no-status-index", "DROP INDEX idx_status_retry"},
	}
	ctx := context.Background()
	stores := make([]*outboxsql.Store, len(layouts))
	for i, l := range layouts {
		name := "wb_" + strings.ReplaceAll(l.name, "-", "_")
		if err := schema.Migrate(ctx, db.DB, name); err != nil {
			b.Fatal(err)
		}
		if l.alter != "" {
			if _, err := db.Exec("ALTER TABLE " + name + " " + l.alter); err != nil {
				b.Fatal(err)
			}
		}
		stores[i] = &outboxsql.Store{DB: db.DB, Table: schema.QuoteIdent(name), Name: name, Timeout: time.Minute}
	}
	took := make([]time.Duration, len(layouts))
	for iter := 0; iter < b.N; iter++ {
		b.StopTimer()
		for _, st := range stores {
			if _, err := db.Exec("TRUNCATE TABLE " + st.Table); err != nil {
				b.Fatal(err)
			}
			for done := 0; done < n; done += 10000 {
				if _, err := db.Exec(fmt.Sprintf("INSERT INTO %s (msg_id, topic, content, sharding_key)"+
					" SELECT CONCAT('m', seq), 'Bench', REPEAT('x', 200), CONCAT('order-', FLOOR(RAND() * 1000000)) FROM seq_%d_to_%d",
					st.Table, done+1, min(done+10000, n))); err != nil {
					b.Fatal(err)
				}
			}
		}
		ids := make([][]int64, len(stores))
		for i, st := range stores {
			rows, err := db.Query("SELECT id FROM " + st.Table + " ORDER BY id")
			if err != nil {
				b.Fatal(err)
			}
			for rows.Next() {
				var id int64
				rows.Scan(&id)
				ids[i] = append(ids[i], id)
			}
			rows.Close()
		}
		b.StartTimer()
		for start := 0; start < n; start += outboxsql.MaxIDsPerStatement {
			for i, st := range stores {
				chunk := ids[i][start:min(start+outboxsql.MaxIDsPerStatement, n)]
				t0 := time.Now()
				changed, err := st.MarkSent(ctx, 0, chunk, time.Now().UnixMilli())
				took[i] += time.Since(t0)
				if err != nil || changed != int64(len(chunk)) {
					b.Fatalf("%s: marked %d of %d rows sent: %v", layouts[i].name, changed, len(chunk), err)
				}
			}
		}
	}
	for i, l := range layouts {
		rate := float64(n*b.N) / took[i].Seconds()
		b.ReportMetric(rate, l.name+"-rows/s")
		b.ReportMetric(took[0].Seconds()/took[i].Seconds(), l.name+"-x")
	}
}

// benchLayout gives the table the index layout OUTBOX_BENCH_LAYOUT names: "previous" is the
// contract's before issue 21 ((status, update_time) and (sharding_key, status, id): every
// write-back moves a row's entries in three status-bearing indexes instead of one);
// "ordered-status" the one before the ordered check moved to (sharding_key, id) (two); for
// a before/after comparison in one run; unset, the contract's layout.
func benchLayout(b *testing.B, db *sql.DB) string {
	b.Helper()
	switch v := os.Getenv("OUTBOX_BENCH_LAYOUT"); v {
	case "", "contract":
		return "contract"
	case "previous", "ordered-status":
		alter := "DROP INDEX idx_sharding_id, ADD INDEX idx_sharding_status (sharding_key, status, id)"
		if v == "previous" {
			alter += ", ADD INDEX idx_status_update (status, update_time)"
		}
		if _, err := db.Exec("ALTER TABLE " + benchTable + " " + alter); err != nil {
			b.Fatal(err)
		}
		return v
	default:
		b.Fatalf("OUTBOX_BENCH_LAYOUT=%q: want previous, ordered-status or contract", v)
		return ""
	}
}

// benchBusyWriters runs, when OUTBOX_BENCH_BUSY=1, the application's writers into the
// benchmark's table (internal/loadgen: 8 writers, 200 transactions/s, a quarter held open up
// to 50 ms after their inserts, a fifth rolled back) until the returned func is called; else
// it does nothing.
func benchBusyWriters(b *testing.B, db *sql.DB, suffix string) (stop func()) {
	b.Helper()
	if os.Getenv("OUTBOX_BENCH_BUSY") != "1" {
		return func() {}
	}
	w, err := outbox.NewWriter(outbox.Config{Table: benchTable})
	if err != nil {
		b.Fatal(err)
	}
	return loadgen.StartBusy(b, db, w, suffix)
}

// BenchmarkDrainMemory drains OUTBOX_BENCH_ROWS and OUTBOX_BENCH_BIG_ROWS due rows (default
// 100k and 1M) with the default configuration and reports the process's peak RSS and peak
// live heap during the drain: the scan streams pages, so both must stay flat whatever the
// backlog (1M/100k ratio ~1). The broker runs in a child process so its in-memory store
// does not count. It also times the backlog query the leader samples every 5 seconds for the
// metrics, on the full backlog.
func BenchmarkDrainMemory(b *testing.B) {
	nameServer := brokerProcess(b)
	for _, n := range []int{envInt(b, "OUTBOX_BENCH_ROWS", 100000), envInt(b, "OUTBOX_BENCH_BIG_ROWS", 1000000)} {
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) {
			db := benchDB(b)
			b.Logf("layout %s, busy writers %v", benchLayout(b, db.DB), os.Getenv("OUTBOX_BENCH_BUSY") == "1")
			r := benchRelay(b, db.DB, benchPublisher(b, nameServer), Config{})
			var total time.Duration
			var peakRSS, peakHeap, baseRSS uint64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				stopWriters := benchBusyWriters(b, db.DB, fmt.Sprintf("-%d", i))
				fillRows(b, db.DB, fmt.Sprintf("m%d-", i), n, 0)
				qstart := time.Now()
				if _, _, err := r.eng.Store().Backlog(context.Background(), time.Now()); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(time.Since(qstart).Microseconds())/1000, "backlog-query-ms")
				runtime.GC()
				debug.FreeOSMemory()
				baseRSS = readRSS(b)
				before := serverStatus(b, db.DB)
				stopRates := sampleRates(db.DB)
				stop := sampleMemory(&peakRSS, &peakHeap)
				b.StartTimer()
				total += drainAll(b, r, n)
				b.StopTimer()
				stopWriters()
				stop()
				var left int
				if err := db.QueryRow("SELECT COUNT(*) FROM "+benchTable+" WHERE msg_id LIKE ? AND status <> 2", fmt.Sprintf("m%d-%%", i)).Scan(&left); err != nil || left != 0 {
					b.Fatalf("%d rows of the backlog left unsent (%v)", left, err)
				}
				reportQuarters(b, stopRates())
				reportServerWork(b, before, serverStatus(b, db.DB), n)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
			b.ReportMetric(float64(baseRSS)/(1<<20), "start-RSS-MB")
			b.ReportMetric(float64(peakRSS)/(1<<20), "peak-RSS-MB")
			b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MB")
		})
	}
}

// readRSS returns the process's resident set size (VmRSS) in bytes.
func readRSS(tb testing.TB) uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	tb.Skip("no VmRSS in /proc/self/status")
	return 0
}

// sampleMemory records the peak RSS and live heap every 10ms until stop is called.
func sampleMemory(peakRSS, peakHeap *uint64) (stop func()) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	return takeEvery(10*time.Millisecond, func() {
		if rss := readRSSQuiet(); rss > *peakRSS {
			*peakRSS = rss
		}
		metrics.Read(sample)
		if h := sample[0].Value.Uint64(); h > *peakHeap {
			*peakHeap = h
		}
	})
}

func readRSSQuiet() uint64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	_, rest, ok := strings.Cut(string(data), "VmRSS:")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.ParseUint(f[0], 10, 64)
	return kb << 10
}

// brokerProcess runs the in-process broker in a child (this test binary running
// TestBenchBrokerProcess) and returns its name server address; the child exits when its
// stdin closes at cleanup.
func brokerProcess(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchBrokerProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "OUTBOX_BENCH_BROKER_PROCESS=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "NAMESRV "); ok {
			go io.Copy(io.Discard, stdout)
			return addr
		}
	}
	b.Fatalf("broker process did not start: %v", sc.Err())
	return ""
}

// TestBenchBrokerProcess is the child of brokerProcess; it does nothing in a normal test run.
func TestBenchBrokerProcess(t *testing.T) {
	if os.Getenv("OUTBOX_BENCH_BROKER_PROCESS") != "1" {
		t.Skip("helper process of BenchmarkDrainMemory")
	}
	s, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("NAMESRV %s\n", s.NameServerAddr())
	io.Copy(io.Discard, os.Stdin)
	s.Close()
}

// BenchmarkScanTick measures one scan tick with 1,000 due rows over an empty history and
// over OUTBOX_BENCH_HISTORY sent rows (default 1M): its cost must follow the due rows, not
// the table. "pages" reads every due row the way DrainOnce does (both statuses, pages of
// 500); "idle" is the tick with nothing due; "drain" is a whole DrainOnce of the 1,000 rows
// to the broker. Each reports the median of 21 ticks. It logs the page query's EXPLAIN and ANALYZE (-v or the benchmark log).
func BenchmarkScanTick(b *testing.B) {
	const due = 1000
	for _, history := range []int{0, envInt(b, "OUTBOX_BENCH_HISTORY", 1000000)} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			db := benchDB(b)
			fillRows(b, db.DB, "sent-", history, int(outbox.StatusSent))
			var firstDue int64
			if err := db.QueryRow("SELECT COALESCE(MAX(id), 0) + 1 FROM " + benchTable).Scan(&firstDue); err != nil {
				b.Fatal(err)
			}
			fillRows(b, db.DB, "due-", due, int(outbox.StatusPending))
			if _, err := db.Exec("ANALYZE TABLE " + benchTable); err != nil {
				b.Fatal(err)
			}
			broker := benchBroker(b)
			r := benchRelay(b, db.DB, benchPublisher(b, broker.NameServerAddr()), Config{BatchSize: 500})
			logPlan(b, db.DB, r)

			tick := func(b *testing.B, nowMs int64) int {
				read := 0
				var buf []outboxsql.Row
				for _, status := range []int{int(outbox.StatusFailed), int(outbox.StatusPending)} {
					c := outboxsql.Cursor{Next: -1 << 62}
					for {
						var err error
						buf, _, _, err = r.eng.ReadPage(context.Background(), status, nowMs, c, 500, int64(r.cfg.MaxPageBytes))
						if err != nil {
							b.Fatal(err)
						}
						read += len(buf)
						if len(buf) < 500 {
							break
						}
						last := buf[len(buf)-1]
						c = outboxsql.Cursor{Next: last.NextRetry, ID: last.ID}
					}
				}
				return read
			}
			// Each measure is the median of scanReps ticks, so one cold read does not decide it.
			const scanReps = 21
			measure := func(b *testing.B, setup func(), tick func()) {
				var all []time.Duration
				for i := 0; i < b.N*scanReps; i++ {
					b.StopTimer()
					setup()
					b.StartTimer()
					start := time.Now()
					tick()
					all = append(all, time.Since(start))
				}
				slices.Sort(all)
				b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "ms/tick")
			}
			b.Run("pages", func(b *testing.B) {
				measure(b, func() {}, func() {
					if n := tick(b, time.Now().UnixMilli()); n != due {
						b.Fatalf("read %d due rows, want %d", n, due)
					}
				})
			})
			b.Run("idle", func(b *testing.B) {
				measure(b, func() {}, func() {
					if n := tick(b, -1); n != 0 { // nothing is due before the epoch
						b.Fatalf("read %d rows, want none", n)
					}
				})
			})
			b.Run("drain", func(b *testing.B) {
				measure(b, func() {
					if _, err := db.Exec("UPDATE "+benchTable+" SET status = 0 WHERE id >= ?", firstDue); err != nil {
						b.Fatal(err)
					}
				}, func() { drainAll(b, r, due) })
			})
		})
	}
}

// logPlan logs EXPLAIN and ANALYZE of the page query as DrainOnce first runs it.
func logPlan(b *testing.B, db *sql.DB, r *Relay) {
	b.Helper()
	if err := r.eng.Store().ScanIndex(context.Background()); err != nil {
		b.Fatal(err)
	}
	q, args := r.eng.Store().PageQuery(int(outbox.StatusPending), time.Now().UnixMilli(), outboxsql.Cursor{Next: -1 << 62}, 500, r.cfg.MaxBodyBytes)
	for _, how := range []string{"EXPLAIN", "ANALYZE"} {
		for _, plan := range testenv.Plan(b, db, how, q, args...) {
			b.Logf("%s of the page query: %v", how, plan)
		}
	}
}

// BenchmarkCommitToAck measures the latency from a writer's commit to the broker storing
// the message, with a relay running (Run, Redis lock, poll interval 1s): a writer commits
// one row every 20ms, OUTBOX_BENCH_LATENCY_MSGS rows in all, and nudges the relay after
// each commit ("nudge") or not ("poll", DisableNudge). Percentiles are in ms (the broker's
// store timestamp has ms resolution).
func BenchmarkCommitToAck(b *testing.B) {
	n := envInt(b, "OUTBOX_BENCH_LATENCY_MSGS", 300)
	for _, mode := range []string{"nudge", "poll"} {
		b.Run(mode, func(b *testing.B) {
			db := benchDB(b)
			rdb, prefix := testenv.Redis(b)
			broker := benchBroker(b)
			pub := benchPublisher(b, broker.NameServerAddr())
			r, err := New(db.DB, rdb, pub, Config{PollInterval: time.Second, LockKey: prefix + "lock", DisableNudge: mode == "poll"})
			if err != nil {
				b.Fatal(err)
			}
			w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(rdb)})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					b.Errorf("Run: %v", err)
				}
			}()
			stored := 1 // the warm-up message
			write := func(msgID string, nudge bool) int64 {
				tx, err := db.Begin()
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Insert(ctx, tx, &outbox.Message{MsgID: msgID, Topic: benchTopic, Tag: "created", Body: []byte(benchBody)}); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				at := time.Now().UnixMilli()
				if nudge {
					if err := w.Nudge(ctx); err != nil {
						b.Fatal(err)
					}
				}
				return at
			}
			waitStored := func(k int) []rmqtest.Message {
				wctx, wcancel := context.WithTimeout(ctx, 60*time.Second)
				defer wcancel()
				msgs, err := broker.WaitMessages(wctx, benchTopic, k)
				if err != nil {
					b.Fatal(err)
				}
				return msgs
			}
			// Warm up: the relay holds the lock and has subscribed once one row went through.
			write("warm-up-row", false)
			stored++
			waitStored(stored)
			time.Sleep(100 * time.Millisecond)

			var lat []float64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				committed := map[string]int64{}
				tick := time.NewTicker(20 * time.Millisecond)
				for k := 0; k < n; k++ {
					id := fmt.Sprintf("lat-%d-%d", i, k)
					committed[id] = write(id, mode == "nudge")
					<-tick.C
				}
				tick.Stop()
				stored += n
				for _, m := range waitStored(stored) {
					if at, ok := committed[m.Properties[outbox.MsgIDProperty]]; ok {
						lat = append(lat, float64(m.StoreTimestamp-at))
					}
				}
			}
			b.StopTimer()
			if len(lat) != n*b.N {
				b.Fatalf("matched %d of %d messages", len(lat), n*b.N)
			}
			slices.Sort(lat)
			pct := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
			b.ReportMetric(pct(0.50), "p50-ms")
			b.ReportMetric(pct(0.95), "p95-ms")
			b.ReportMetric(pct(0.99), "p99-ms")
			b.ReportMetric(lat[len(lat)-1], "max-ms")
		})
	}
}
