// SPDX-License-Identifier: Apache-2.0

package auditor_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/internal/auditor"
	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

// countingLookup counts the requests the auditor makes of the real lookup.
type countingLookup struct {
	brokeraudit.Lookup
	checks, positions atomic.Int64
}

func (c *countingLookup) Check(ctx context.Context, ps []brokeraudit.Position) ([]brokeraudit.Finding, error) {
	c.checks.Add(1)
	c.positions.Add(int64(len(ps)))
	return c.Lookup.Check(ctx, ps)
}

// BenchmarkDrainWithAudit drains the same backlog (AUDIT_BENCH_ROWS, default 30,000) to an
// rmqtest broker six times in one run under busy writers (loadgen.StartBusy), alternating
// the audit off (no positions recorded, no auditor) and on (positions recorded, and checked
// 1 ms after they are sent, at the default 200 rows/s, or AUDIT_BENCH_RATE), and reports
// each drain rate, the median of the on/off ratios, and the audit's lookups, broker requests
// and database statements (reads and writes, counted by a connector wrapping the MySQL
// driver's own, testenv.CountedDB) per 100k rows checked. Run with -benchtime=1x.
func BenchmarkDrainWithAudit(b *testing.B) {
	rows := 30000
	if v, err := strconv.Atoi(os.Getenv("AUDIT_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		b.Fatal(err)
	}
	defer broker.Close()
	broker.CreateTopic("bench", 8)
	broker.CreateTopic("orders", 8)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 3 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	for i := 0; i < b.N; i++ {
		var ratios []float64
		var checked, checks, requests int64
		var stmts testenv.Counts
		for round := 1; round <= 3; round++ {
			off, _ := drainOnce(b, pub, broker, rows, nil)
			rq := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{broker.NameServerAddr()}})
			lookup := &countingLookup{Lookup: rq}
			on, n := drainOnce(b, pub, broker, rows, lookup)
			stmts.Reads, stmts.Writes, stmts.Catalog = stmts.Reads+n.Reads, stmts.Writes+n.Writes, stmts.Catalog+n.Catalog
			b.ReportMetric(off, fmt.Sprintf("rows/s-off-%d", round))
			b.ReportMetric(on, fmt.Sprintf("rows/s-on-%d", round))
			ratios = append(ratios, on/off)
			checked += lookup.positions.Load()
			checks += lookup.checks.Load()
			requests += int64(rq.Requests())
		}
		slices.Sort(ratios)
		b.ReportMetric(ratios[1], "median-on/off")
		b.ReportMetric(float64(checked), "rows-checked")
		b.ReportMetric(float64(checks)*100000/float64(max(1, checked)), "lookups/100k-rows")
		b.ReportMetric(float64(requests)*100000/float64(max(1, checked)), "broker-requests/100k-rows")
		b.ReportMetric(float64(stmts.Reads)*100000/float64(max(1, checked)), "db-reads/100k-rows")
		b.ReportMetric(float64(stmts.Writes)*100000/float64(max(1, checked)), "db-writes/100k-rows")
		b.ReportMetric(float64(stmts.Catalog)/3, "db-catalog-reads/start")
	}
}

// drainOnce fills a table with rows due rows and drains it with one relay, the audit running
// beside it when lookup is set, on a pool of its own whose statements are counted; it
// returns rows per second and the audit's statements.
func drainOnce(b *testing.B, pub relay.Publisher, broker *rmqtest.Server, rows int, lookup brokeraudit.Lookup) (float64, testenv.Counts) {
	b.Helper()
	db := testenv.MySQL(b)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		b.Fatal(err)
	}
	auditor.CreateJournal(b, db.DB, "local_message")
	if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content) SELECT CONCAT('m-', seq), 'bench', REPEAT('x', 200) FROM seq_1_to_" + itoa(rows)); err != nil {
		b.Fatal(err)
	}
	rdb, prefix := testenv.Redis(b)
	r, err := relay.New(db.DB, rdb, pub, relay.Config{RecordPositions: lookup != nil, DisableNudge: true, LockKey: prefix + "lock", LockTTL: 3 * time.Second,
		Backoff: backoff.Policy{Base: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}})
	if err != nil {
		b.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	adb, counter := testenv.CountedDB(b, db.DSN)
	if lookup != nil {
		a, err := auditor.New(adb, lookup, auditor.Config{Database: "bench", Table: "local_message", MinAge: time.Millisecond,
			MaxAge: time.Hour, Rate: benchRate(), Batch: 100, Idle: 50 * time.Millisecond, Log: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		go func() { defer close(done); _ = a.Run(actx) }()
	} else {
		close(done)
	}
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	stopBusy := loadgen.StartBusy(b, db.DB, w, "bench")
	start := time.Now()
	sent := auditor.DrainAll(b, r, rows)
	took := time.Since(start)
	stopBusy()
	cancel()
	<-done
	return float64(sent) / took.Seconds(), counter.Counts()
}

// benchRate is audit.rate for the benchmark: AUDIT_BENCH_RATE, else the default 200.
func benchRate() float64 {
	if v, err := strconv.ParseFloat(os.Getenv("AUDIT_BENCH_RATE"), 64); err == nil && v > 0 {
		return v
	}
	return 200
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}
