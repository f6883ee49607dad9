// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// BenchmarkTxmsgCommitToConsume is BenchmarkCommitToConsume for the half-message path
// (outbox/txmsg): per message a transaction inserts the row and sends the half, commits,
// and Finish ends the half and marks the row; measured from the commit to the message's
// arrival at a push consumer, and the writer's own time (Prepare and Finish) beside it. The
// relay binary runs beside with a check group, as in production. Run it with -benchtime=200x.
func BenchmarkTxmsgCommitToConsume(b *testing.B) {
	for _, name := range []string{"rmqtest", "rocketmq"} {
		b.Run(name, func(b *testing.B) {
			t := benchTargets[name](b)
			e := newEnv(b, t)
			topic := t.topic(b, "txlatency")
			in := t.consume(b, topic)
			group := "outbox_tx_" + testenv.RandomSuffix(8)
			e.startRelay(b, "OUTBOX_RELAY_POLL_INTERVAL=1s", "OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS="+group, txSecretEnv)
			p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{t.nameServer})),
				producer.WithGroupName("txw_"+testenv.RandomSuffix(8)), producer.WithInstanceName("txw-"+testenv.RandomSuffix(8)),
				producer.WithRetry(0))
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Start(); err != nil {
				b.Fatal(err)
			}
			defer p.Shutdown()
			tp, err := txmsg.New(txmsg.Config{Writer: e.writer, Sender: p, NameServers: []string{t.nameServer}, CheckGroup: group, Secret: txSecret})
			if err != nil {
				b.Fatal(err)
			}
			defer tp.Close()
			ctx := context.Background()
			send := func(id string) (commitAt time.Time, writer time.Duration) {
				start := time.Now()
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				h, err := tp.Prepare(ctx, tx, &outbox.Message{MsgID: id, Topic: topic, Body: []byte(`{"orderSn":"SN1"}`)})
				if err != nil {
					b.Fatal(err)
				}
				prepared := time.Since(start)
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				commitAt = time.Now()
				if err := tp.Finish(ctx, e.db.DB, h, nil); err != nil {
					b.Fatal(err)
				}
				return commitAt, prepared + time.Since(commitAt)
			}
			measureWriterPath(b, in, name, "half-message path", "Prepare + Finish", "txlat", send)
			if n := e.count(b, "status <> 2"); n != 0 {
				b.Fatalf("%d rows not marked sent", n)
			}
		})
	}
}

// BenchmarkPlainSendCommitToConsume is the comparison the outbox exists to beat: the service
// commits its business row, then sends the message itself with a synchronous send (nothing
// covers a crash or a failed send between the two). Measured from the commit to the message's
// arrival at a push consumer, and the writer's own time (the send) beside it, so that
// docs/performance.md can put the three paths side by side. Run it with -benchtime=200x.
func BenchmarkPlainSendCommitToConsume(b *testing.B) {
	for _, name := range []string{"rmqtest", "rocketmq"} {
		b.Run(name, func(b *testing.B) {
			t := benchTargets[name](b)
			e := newEnv(b, t)
			topic := t.topic(b, "plainlatency")
			in := t.consume(b, topic)
			if _, err := e.db.Exec("CREATE TABLE IF NOT EXISTS plain_orders (id BIGINT AUTO_INCREMENT PRIMARY KEY, order_sn VARCHAR(64) NOT NULL)"); err != nil {
				b.Fatal(err)
			}
			p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{t.nameServer})),
				producer.WithGroupName("plain_"+testenv.RandomSuffix(8)), producer.WithInstanceName("plain-"+testenv.RandomSuffix(8)),
				producer.WithRetry(0))
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Start(); err != nil {
				b.Fatal(err)
			}
			defer p.Shutdown()
			ctx := context.Background()
			send := func(id string) (commitAt time.Time, writer time.Duration) {
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO plain_orders (order_sn) VALUES (?)", id); err != nil {
					b.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					b.Fatal(err)
				}
				commitAt = time.Now()
				m := primitive.NewMessage(topic, []byte(`{"orderSn":"SN1"}`))
				m.WithProperty(outbox.MsgIDProperty, id)
				if _, err := p.SendSync(ctx, m); err != nil {
					b.Fatal(err)
				}
				return commitAt, time.Since(commitAt)
			}
			measureWriterPath(b, in, name, "plain send after commit", "the send", "plain", send)
		})
	}
}

// measureWriterPath measures a writer's path one message at a time: send commits a message
// and publishes it its own way, returning the commit's time and the writer's own time after
// its INSERT; the latency runs from the commit to the message's arrival in in. It reports
// p50/p99 and the writer's p50 as benchmark metrics and the fuller figures on stderr.
func measureWriterPath(b *testing.B, in *inbox, broker, path, own, prefix string, send func(id string) (time.Time, time.Duration)) {
	b.Helper()
	send("warm-up")
	in.wait(b, 1, 60*time.Second)
	lat := make([]time.Duration, 0, b.N)
	mine := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("%s-%06d", prefix, i)
		commitAt, w := send(id)
		for in.copies(id) == 0 {
			if time.Since(commitAt) > 30*time.Second {
				b.Fatalf("%s not consumed within 30s", id)
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat = append(lat, time.Since(commitAt))
		mine = append(mine, w)
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(mine)
	q := func(d []time.Duration, p float64) float64 {
		return float64(d[int(p*float64(len(d)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(lat, 0.5), "p50-ms")
	b.ReportMetric(q(lat, 0.99), "p99-ms")
	b.ReportMetric(q(mine, 0.5), "writer-p50-ms")
	if b.N == 1 {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %s, commit to consume over %d messages: p50 %.1f ms, p95 %.1f ms, p99 %.1f ms, max %.1f ms; writer's own time (%s) p50 %.1f ms, p99 %.1f ms\n",
		broker, path, len(lat), q(lat, 0.5), q(lat, 0.95), q(lat, 0.99), q(lat, 1), own, q(mine, 0.5), q(mine, 0.99))
}
