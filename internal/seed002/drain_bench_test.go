// SPDX-License-Identifier: Apache-2.0

package seed002_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/seed002"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// BenchmarkDrain is seed 002's algorithm beside relay.BenchmarkDrain: one firing of the job
// (ProcessOnce) over a backlog of OUTBOX_BENCH_ROWS due rows (default 100000) with 200-byte
// bodies, to the in-process broker. The fill is outside the timer.
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
	r, err := seed002.New(db.DB, rdb, pub, seed002.Config{LockKey: prefix + "LocalMessageScan"})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", 200))
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
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
		if err != nil {
			b.Fatal(err)
		}
		if st.Sent != n {
			b.Fatalf("one firing sent %d of %d rows: %+v", st.Sent, n, st)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "msgs/s")
}
