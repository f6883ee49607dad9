// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"fmt"
	"slices"
	"testing"
)

// BenchmarkDrainPositions measures what recording the broker positions costs the drain:
// OUTBOX_BENCH_PAIRS pairs (default 5) of drains of OUTBOX_BENCH_ROWS due rows (default
// 30,000) to the in-process broker, each pair one relay without positions (off) and one
// recording them (on), in alternating order, each drain on a table of its own, busy writers
// beside it with OUTBOX_BENCH_BUSY=1. It logs every drain and reports the median on/off rate
// ratio of the pairs with its lowest and highest, and the median redo written per 1,000
// rows off and on (Innodb_os_log_written: server-wide, other clients add to it). Run with
// -benchtime=1x.
func BenchmarkDrainPositions(b *testing.B) {
	n := envInt(b, "OUTBOX_BENCH_ROWS", 30000)
	pairs := envInt(b, "OUTBOX_BENCH_PAIRS", 5)
	broker := benchBroker(b)
	pub := benchPublisher(b, broker.NameServerAddr())
	for i := 0; i < b.N; i++ {
		var ratios, redoOff, redoOn []float64
		for p := 0; p < pairs; p++ {
			order := []bool{false, true}
			if p%2 == 1 {
				order = []bool{true, false}
			}
			rate := map[bool]float64{}
			for _, on := range order {
				r, redo := drainRecording(b, pub, n, on, fmt.Sprintf("p%d-%v", p, on))
				rate[on] = r
				if on {
					redoOn = append(redoOn, redo)
				} else {
					redoOff = append(redoOff, redo)
				}
				b.Logf("pair %d positions=%v: %.0f rows/s, %.0f redo-KB/krow", p+1, on, r, redo)
			}
			ratios = append(ratios, rate[true]/rate[false])
			b.Logf("pair %d on/off %.3f", p+1, rate[true]/rate[false])
		}
		b.ReportMetric(median(ratios), "median-on/off")
		b.ReportMetric(slices.Min(ratios), "lowest-on/off")
		b.ReportMetric(slices.Max(ratios), "highest-on/off")
		b.ReportMetric(median(redoOff), "redo-KB/krow-off")
		b.ReportMetric(median(redoOn), "redo-KB/krow-on")
	}
}

// drainRecording drains n due rows of a table of its own with one DrainOnce, recording
// positions or not, and returns rows per second and redo KB per 1,000 rows.
func drainRecording(b *testing.B, pub Publisher, n int, positions bool, suffix string) (rate, redoKB float64) {
	b.Helper()
	db := benchDB(b)
	fillRows(b, db.DB, "m-", n, 0)
	r := benchRelay(b, db.DB, pub, Config{RecordPositions: positions})
	stop := benchBusyWriters(b, db.DB, suffix)
	before := serverStatus(b, db.DB)
	took := drainAll(b, r, n)
	after := serverStatus(b, db.DB)
	stop()
	db.DB.Close() // each drain has its own database: keep the server's connections for the next
	return float64(n) / took.Seconds(), (after["Innodb_os_log_written"] - before["Innodb_os_log_written"]) / 1024 * 1000 / float64(n)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
