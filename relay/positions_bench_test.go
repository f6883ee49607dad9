// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"fmt"
	"os"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// BenchmarkDrainPositions measures what recording the broker positions costs the drain:
// OUTBOX_BENCH_PAIRS pairs (default 5) of drains of OUTBOX_BENCH_ROWS due rows (default
// 30,000) to the in-process broker, each pair one relay without positions (off) and one
// appending them to the stored-position journal (on), in alternating order, each drain on a
// table of its own, busy writers beside it with OUTBOX_BENCH_BUSY=1. A drain ends when
// DrainOnce returns, which includes the journal's last append. It prints every drain to
// stderr and reports the median on/off rate ratio of the pairs with its lowest and highest,
// the median redo written per 1,000 rows off and on (Innodb_os_log_written: server-wide,
// other clients add to it), and the relay's statements per 100,000 rows off and on, counted
// at the driver.
// It fails when the "on" drains left a row out of the journal. Run with -benchtime=1x.
func BenchmarkDrainPositions(b *testing.B) {
	n := envInt(b, "OUTBOX_BENCH_ROWS", 30000)
	pairs := envInt(b, "OUTBOX_BENCH_PAIRS", 5)
	broker := benchBroker(b)
	pub := benchPublisher(b, broker.NameServerAddr())
	for i := 0; i < b.N; i++ {
		var ratios []float64
		redo, stmts := map[bool][]float64{}, map[bool][]float64{}
		for p := 0; p < pairs; p++ {
			order := []bool{false, true}
			if p%2 == 1 {
				order = []bool{true, false}
			}
			rate := map[bool]float64{}
			for _, on := range order {
				d := drainRecording(b, pub, n, on, fmt.Sprintf("p%d-%v", p, on))
				rate[on] = d.rate
				redo[on] = append(redo[on], d.redoKB)
				stmts[on] = append(stmts[on], d.stmts)
				// To stderr: the benchmark's log keeps only its first lines.
				fmt.Fprintf(os.Stderr, "pair %d positions=%v: %.0f rows/s, %.0f redo-KB/krow, %.0f statements/100k rows (%.0f writes)\n", p+1, on, d.rate, d.redoKB, d.stmts, d.writes)
			}
			ratios = append(ratios, rate[true]/rate[false])
			fmt.Fprintf(os.Stderr, "pair %d on/off %.3f\n", p+1, rate[true]/rate[false])
		}
		b.ReportMetric(median(ratios), "median-on/off")
		b.ReportMetric(slices.Min(ratios), "lowest-on/off")
		b.ReportMetric(slices.Max(ratios), "highest-on/off")
		b.ReportMetric(median(redo[false]), "redo-KB/krow-off")
		b.ReportMetric(median(redo[true]), "redo-KB/krow-on")
		b.ReportMetric(median(stmts[false]), "stmts/100krow-off")
		b.ReportMetric(median(stmts[true]), "stmts/100krow-on")
	}
}

// drained is one drain's figures: rows per second, redo KB per 1,000 rows, and the relay's
// statements (and writes alone) per 100,000 rows.
type drained struct{ rate, redoKB, stmts, writes float64 }

// drainRecording drains n due rows of a table of its own with one DrainOnce, recording
// positions in the journal or not, through a pool that counts the relay's statements.
func drainRecording(b *testing.B, pub Publisher, n int, positions bool, suffix string) drained {
	b.Helper()
	db := benchDB(b)
	fillRows(b, db.DB, "m-", n, 0)
	counted, counter := testenv.CountedDB(b, db.DSN)
	r := benchRelay(b, counted, pub, Config{RecordPositions: positions})
	stop := benchBusyWriters(b, db.DB, suffix)
	before, c0 := serverStatus(b, db.DB), counter.Counts()
	took := drainAll(b, r, n)
	after, c1 := serverStatus(b, db.DB), counter.Counts()
	stop()
	var recorded int
	if err := db.QueryRow("SELECT COALESCE(SUM(row_count), 0) FROM " + schema.StoredLogTable(benchTable)).Scan(&recorded); err != nil {
		b.Fatal(err)
	}
	if positions && recorded < n || !positions && recorded != 0 {
		b.Fatalf("positions=%v: the journal holds %d rows' positions after a drain of %d", positions, recorded, n)
	}
	counted.Close()
	db.DB.Close() // each drain has its own database: keep the server's connections for the next
	per := 100_000 / float64(n)
	return drained{
		rate:   float64(n) / took.Seconds(),
		redoKB: (after["Innodb_os_log_written"] - before["Innodb_os_log_written"]) / 1024 * 1000 / float64(n),
		stmts:  float64(c1.Reads+c1.Writes+c1.Other-c0.Reads-c0.Writes-c0.Other) * per,
		writes: float64(c1.Writes-c0.Writes) * per,
	}
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
