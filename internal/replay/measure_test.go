// SPDX-License-Identifier: Apache-2.0

package replay_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
	"github.com/outbox-relay/outbox-relay/schema"
)

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// BenchmarkReplayOnRocketMQ replays OUTBOX_REPLAY_ROWS (100,000) sent rows twice to Apache
// RocketMQ at OUTBOX_REPLAY_RATE (2,000) messages a second, with a consumer group guarded by
// idempotency.SQLGuard that starts without dedupe state: the first replay's copies are each
// applied once, the second's (the group now holding the state) none. It fails unless the dry
// run's count equals what each run sent and the group applied exactly the rows; it reports the
// rate achieved (wall clock) against the limit. Run with -benchtime=1x.
func BenchmarkReplayOnRocketMQ(b *testing.B) {
	nameSrv := testenv.RocketMQ(b)
	rows, rate := envInt("OUTBOX_REPLAY_ROWS", 100000), envInt("OUTBOX_REPLAY_RATE", 2000)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		tb := setupMeasure(b, nameSrv, rows)
		b.StartTimer()
		for run, wantApplied := range []int{rows, rows} {
			cfg := replay.Config{DB: tb.db.DB, Table: table, Publisher: tb.pub, Rate: float64(rate)}
			cfg.Filter.Topic = tb.topic
			counted, through, err := replay.Count(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			cfg.Filter.ToID = through
			res, err := replay.Run(context.Background(), cfg)
			took := time.Since(start)
			if err != nil || res.Sent != counted || counted != int64(rows) {
				b.Fatalf("run %d: dry run %d, sent %d (%v), rows %d", run+1, counted, res.Sent, err, rows)
			}
			testenv.Eventually(b, 15*time.Minute, "the group to handle every copy", func() bool {
				return tb.group.replayed.Load() >= int64(rows*(run+1))
			})
			orders, effects, twice := tb.group.applied(b, tb.db.DB)
			if orders != wantApplied || effects != wantApplied || twice != 0 {
				b.Fatalf("run %d: %d orders applied, %d effects, %d twice; want %d, %d, 0", run+1, orders, effects, twice, wantApplied, wantApplied)
			}
			achieved := float64(res.Sent) / took.Seconds()
			b.Logf("run %d: dry run %d, sent %d in %s: %.0f msgs/s against a limit of %d (%.1f%%); group applied %d in all, %d twice",
				run+1, counted, res.Sent, took.Round(time.Millisecond), achieved, rate, 100*achieved/float64(rate), effects, twice)
			b.ReportMetric(achieved, fmt.Sprintf("msgs/s_run%d", run+1))
		}
	}
}

type measureBundle struct {
	db    *testenv.DB
	pub   *rocketmq.Publisher
	topic string
	group *consumerGroup
}

// setupMeasure writes rows sent rows of a new topic (keys SN-n, half with a sharding key),
// creates the topic on the broker and starts a fresh consumer group on it.
func setupMeasure(b *testing.B, nameSrv string, rows int) *measureBundle {
	db := testenv.MySQL(b)
	if err := schema.Migrate(context.Background(), db.DB, table); err != nil {
		b.Fatal(err)
	}
	topic := "replay_" + testenv.RandomSuffix(6)
	_, err := db.Exec("INSERT INTO "+table+" (msg_id, topic, tag, content, status, msg_keys, sharding_key, sent_time)"+
		" SELECT CONCAT('m-', seq), ?, 'paid', CONCAT('{\"order\":', seq, '}'), 2, CONCAT('SN', seq),"+
		" IF(seq % 2 = 0, CONCAT('cust-', seq % 64), ''), 1764000000000 + seq FROM seq_1_to_"+strconv.Itoa(rows), topic)
	if err != nil {
		b.Fatal(err)
	}
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{nameSrv})))
	if err != nil {
		b.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(testenv.RocketMQBroker()),
		admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
		b.Fatalf("create topic %s: %v", topic, err)
	}
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{nameSrv}, SendTimeout: 3 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { pub.Close() })
	testenv.Eventually(b, 30*time.Second, "a route to "+topic, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return pub.Send(ctx, relay.Route{}, &relay.Message{MsgID: "probe", Topic: topic, Tag: "probe", Body: []byte("probe")}) == nil
	})
	g := startGroupOn(b, db, nameSrv, "fresh_"+testenv.RandomSuffix(6), topic, "paid")
	return &measureBundle{db: db, pub: pub, topic: topic, group: g}
}
