// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// benchRows is the history of sent rows the benchmarks run on: OUTBOX_BENCH_ROWS, default
// 100000 (docs/performance.md records 1M).
func benchRows() int {
	if n, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && n > 0 {
		return n
	}
	return 100000
}

// seedHistory fills table with n sent rows whose update_time spreads evenly over the last
// 7 days (so about n/168 in the last hour), 1000 dead rows and 100 pending ones.
func seedHistory(tb testing.TB, db *sql.DB, tbl string, n int) {
	tb.Helper()
	ctx := context.Background()
	if err := schema.Migrate(ctx, db, tbl); err != nil {
		tb.Fatal(err)
	}
	for from := 1; from <= n; from += 100000 {
		to := min(from+99999, n)
		if _, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO `%s` (msg_id, topic, content, status, update_time, sent_time, next_retry_time)"+
			" SELECT CONCAT('m-', seq), 'orders', '{\"order\":1}', 2, NOW() - INTERVAL (seq * 604800 DIV %d) SECOND, 1,"+
			" (UNIX_TIMESTAMP(NOW()) - seq * 604800 DIV %d) * 1000 FROM seq_%d_to_%d", tbl, n, n, from, to)); err != nil {
			tb.Fatal(err)
		}
	}
	for _, q := range []string{
		"INSERT INTO `%s` (msg_id, topic, content, status, fail_reason, update_time, next_retry_time) SELECT CONCAT('d-', seq), 'orders', '{}', 3," +
			" IF(seq %% 10 = 0, 'body too large', 'send: request timeout'), NOW() - INTERVAL seq MINUTE, (UNIX_TIMESTAMP(NOW()) - 60 * seq) * 1000 FROM seq_1_to_1000",
		"INSERT INTO `%s` (msg_id, topic, content, status) SELECT CONCAT('p-', seq), 'orders', '{}', 0 FROM seq_1_to_100",
		"ANALYZE TABLE `%s`",
	} {
		if _, err := db.ExecContext(ctx, fmt.Sprintf(q, tbl)); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkDashboardQueries times what one overview and one dead-message search cost the
// database on a table with a long history, and logs each statement's plan.
func BenchmarkDashboardQueries(b *testing.B) {
	db := testenv.MySQL(b)
	n := benchRows()
	seedHistory(b, db.DB, table, n)
	ctx := context.Background()
	now, err := ops.DBClock(ctx, db.DB)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d sent rows over 7 days, 1000 dead, 100 pending", n)
	for _, q := range []struct{ name, sql string }{
		{"count by status (overview)", "SELECT status, COUNT(*) FROM " + table + " GROUP BY status"},
		// The sent and dead rows' part of ops.RecentActivity (the failed rows' part reads the
		// failed rows).
		{"activity of one 15 s window", fmt.Sprintf("SELECT status, FLOOR((next_retry_time DIV 1000 - %d) / 15), COUNT(*) FROM %s"+
			" WHERE status IN (2, 3) AND next_retry_time >= %d AND next_retry_time < %d GROUP BY 1, 2", now-17, table, (now-17)*1000, (now-2)*1000)},
		{"activity of the last hour (fill)", fmt.Sprintf("SELECT status, FLOOR((next_retry_time DIV 1000 - %d) / 15), COUNT(*) FROM %s"+
			" WHERE status IN (2, 3) AND next_retry_time >= %d AND next_retry_time < %d GROUP BY 1, 2", now-3602, table, (now-3602)*1000, (now-2)*1000)},
		{"the same by sent_time (not indexed)", fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE sent_time >= %d", table, (now-3600)*1000)},
		{"dead by reason", "SELECT id FROM " + table + " WHERE status = 3 AND is_deleted = 0 AND fail_reason LIKE '%too large%' ORDER BY id LIMIT 50"},
	} {
		for _, plan := range testenv.Explain(b, db.DB, q.sql) {
			b.Logf("EXPLAIN %s: type=%s key=%s rows=%s Extra=%s", q.name, plan["type"], plan["key"], plan["rows"], plan["Extra"])
		}
	}

	b.Run("overview", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ops.Status(ctx, db.DB, table, time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What one overview costs the relay process itself (the database's time is above): CPU
	// of this process per overview, from getrusage, the cache left out.
	b.Run("overview-relay-cpu", func(b *testing.B) {
		rdb, prefix := testenv.Redis(b)
		d, err := New(rdb, Config{OpenReads: true, Databases: []Source{{Name: "default", DB: db.DB, Tables: []string{table},
			LockKey: func(t string) string { return prefix + t }}}})
		if err != nil {
			b.Fatal(err)
		}
		var before, after syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
		for i := 0; i < b.N; i++ {
			if _, err := json.Marshal(d.overview(ctx)); err != nil {
				b.Fatal(err)
			}
		}
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
		cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/op")
	})
	b.Run("activity-window", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ops.RecentActivity(ctx, db.DB, table, now-17, now-2, 15); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("activity-fill-1h", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ops.RecentActivity(ctx, db.DB, table, now-3602, now-2, 15); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dead-by-reason", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := ops.DeadSearch(ctx, db.DB, table, ops.DeadQuery{Reason: "too large"}, 0, 50); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// procSample is a process's CPU time so far and its resident memory.
type procSample struct {
	cpu time.Duration
	rss int64 // bytes
}

// readProc reads /proc/<pid>/stat (utime + stime, in clock ticks of 1/100 s on Linux) and
// /proc/<pid>/status (VmRSS).
func readProc(pid int) (procSample, error) {
	var s procSample
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	s.cpu = time.Duration(ut+st) * 10 * time.Millisecond
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			s.rss = kb << 10
		}
	}
	return s, nil
}

// measure samples pid once a second for d: CPU used (as % of one core) and mean/max RSS.
func measure(tb testing.TB, pid int, d time.Duration) (cpuPct, rssMeanMB, rssMaxMB float64) {
	tb.Helper()
	start, err := readProc(pid)
	if err != nil {
		tb.Fatal(err)
	}
	t0 := time.Now()
	var sum, n, max int64
	for time.Since(t0) < d {
		time.Sleep(time.Second)
		s, err := readProc(pid)
		if err != nil {
			tb.Fatal(err)
		}
		sum, n = sum+s.rss, n+1
		if s.rss > max {
			max = s.rss
		}
	}
	end, _ := readProc(pid)
	return 100 * (end.cpu - start.cpu).Seconds() / time.Since(t0).Seconds(), float64(sum/n) / (1 << 20), float64(max) / (1 << 20)
}

// BenchmarkDashboardCost measures the relay process's CPU and RSS in one run, in three
// phases: no page open, the dashboard open in headless Chromium (refreshing itself every 5 s),
// no page again. The relay runs with the default settings on a table with a long history.
// OUTBOX_BENCH_COST_SECONDS sets each phase's length (default 60); OUTBOX_BENCH_ROWS the history.
// Run with -benchtime=1x.
func BenchmarkDashboardCost(b *testing.B) {
	node, chromium := browserTools(b)
	phase := 60 * time.Second
	if s, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_COST_SECONDS")); err == nil && s > 0 {
		phase = time.Duration(s) * time.Second
	}
	db := testenv.MySQL(b)
	_, prefix := testenv.Redis(b)
	seedHistory(b, db.DB, table, benchRows())
	if err := schema.Migrate(context.Background(), db.DB, otherTable); err != nil {
		b.Fatal(err)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(broker.Close)
	relay := startRelayBinary(b, db, prefix, broker, "OUTBOX_LOG_LEVEL=warn", "OUTBOX_RELAY_POLL_INTERVAL=1s", "OUTBOX_LOCK_TTL=10s")
	pid := relay.cmd.Process.Pid
	time.Sleep(20 * time.Second) // let the start-up (activity fill, first scans, route lookups) pass
	b.ResetTimer()

	type result struct{ cpu, rss, rssMax float64 }
	var closed1, open1, closed2 result
	closed1.cpu, closed1.rss, closed1.rssMax = measure(b, pid, phase)

	ctx, cancel := context.WithTimeout(context.Background(), phase+time.Minute)
	defer cancel()
	page := exec.CommandContext(ctx, node, filepath.Join(browserDir, "keep-open.mjs"))
	page.Env = append(os.Environ(), "BASE_URL="+relay.base, "CHROMIUM="+chromium,
		fmt.Sprintf("SECONDS_OPEN=%d", int((phase+2*time.Second).Seconds())))
	out := &testenv.SyncBuffer{}
	page.Stdout, page.Stderr = out, out
	if err := page.Start(); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, 30*time.Second, "the page to open", func() bool { return strings.Contains(out.String(), "page open") })
	open1.cpu, open1.rss, open1.rssMax = measure(b, pid, phase)
	if err := page.Wait(); err != nil {
		b.Fatalf("keep-open: %v\n%s", err, out.String())
	}
	closed2.cpu, closed2.rss, closed2.rssMax = measure(b, pid, phase)

	b.Logf("page: %s", strings.ReplaceAll(strings.TrimSpace(out.String()), "\n", "; "))
	for _, r := range []struct {
		name string
		r    result
	}{{"no page", closed1}, {"page open", open1}, {"no page again", closed2}} {
		b.Logf("relay, %-13s: CPU %.2f%% of a core, RSS mean %.1f MiB, max %.1f MiB", r.name, r.r.cpu, r.r.rss, r.r.rssMax)
	}
	b.ReportMetric((closed1.cpu+closed2.cpu)/2, "cpu%-closed")
	b.ReportMetric(open1.cpu, "cpu%-open")
	b.ReportMetric((closed1.rss+closed2.rss)/2, "rssMiB-closed")
	b.ReportMetric(open1.rss, "rssMiB-open")
}
