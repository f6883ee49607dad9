// SPDX-License-Identifier: Apache-2.0

package classicrelay_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/classicrelay"
	"github.com/outbox-relay/outbox-relay/internal/loadgen"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// BenchmarkDrain is seed 002's algorithm beside relay.BenchmarkDrain: one firing of the job
// (ProcessOnce) over a backlog of OUTBOX_BENCH_ROWS due rows (default 100000) with 200-byte
// bodies, to the in-process broker. The fill is outside the timer. With OUTBOX_BENCH_BUSY=1,
// busy writers commit into the table throughout (busyWriters), as relay's
// BenchmarkDrainMemory runs them.
func BenchmarkDrain(b *testing.B) {
	n := 100000
	if v := os.Getenv("OUTBOX_BENCH_ROWS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("OUTBOX_BENCH_ROWS=%q: want a positive integer", v)
		}
	}
	db, rdb, prefix, _, pub, w := setup(b)
	ctx := context.Background()
	r, err := classicrelay.New(db.DB, rdb, pub, classicrelay.Config{LockKey: prefix + "LocalMessageScan"})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", 200))
	busy := os.Getenv("OUTBOX_BENCH_BUSY") == "1"
	b.Logf("busy writers %v", busy)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		stopWriters := busyWriters(b, db.DB, w, busy, fmt.Sprintf("-%d", i))
		msgs := make([]outbox.Message, n)
		for k := range msgs {
			msgs[k] = outbox.Message{MsgID: fmt.Sprintf("s%d-%d", i, k), Topic: "Bench", Tag: "created", Body: body}
		}
		if err := w.InsertNoTx(ctx, db.DB, msgs); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		st, err := r.ProcessOnce(ctx)
		total += time.Since(start)
		b.StopTimer()
		stopWriters()
		if err != nil {
			b.Fatal(err)
		}
		var left int
		if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE msg_id LIKE ? AND status <> 2", fmt.Sprintf("s%d-%%", i)).Scan(&left); err != nil {
			b.Fatal(err)
		}
		if left != 0 || st.Sent < n || (st.Sent > n && !busy) {
			b.Fatalf("one firing sent %d of %d rows, %d of the backlog left: %+v", st.Sent, n, left, st)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
}

// busyWriters runs, when busy, the application's writers into the table (internal/loadgen:
// 8 writers, 200 transactions/s, a quarter held open up to 50 ms, a fifth rolled back) until
// the returned func is called.
func busyWriters(b *testing.B, db *sql.DB, w *outbox.Writer, busy bool, suffix string) (stop func()) {
	b.Helper()
	if !busy {
		return func() {}
	}
	return loadgen.StartBusy(b, db, w, suffix)
}
