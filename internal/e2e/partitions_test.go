// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// metricsOf returns p's /metrics page ("" until its HTTP server has logged its address).
func metricsOf(p *proc) string { return testenv.Metrics(p.httpAddr()) }

// partitionOwners reads every process's owned partitions from its metrics and reports
// whether each of n partitions is owned by exactly one of them, each holding n/len(ps) or
// one more.
func partitionOwners(ps []*proc, n int) (ok bool, desc string) {
	count := map[int]int{}
	balanced := true
	for i, p := range ps {
		owned := testenv.OwnedPartitions(metricsOf(p))
		desc += fmt.Sprintf("relay %d: %v; ", i, owned)
		for _, o := range owned {
			count[o]++
		}
		if len(owned) < n/len(ps) || len(owned) > n/len(ps)+1 {
			balanced = false
		}
	}
	if len(count) != n || !balanced {
		return false, desc
	}
	for _, c := range count {
		if c != 1 {
			return false, desc
		}
	}
	return true, desc
}

// TestThreeRelaysShareEightPartitionsAndSurviveKill9: three relay processes on one table
// with relay.partitions = 8 while writers commit ordered events for 40 keys, beside a busy
// application that holds transactions open and rolls some back. At steady state
// the metrics show every partition owned by exactly one relay (2 or 3 each). One relay is
// killed with kill -9; the two others take its partitions (the time is logged: it is the
// lock's TTL plus at most a quarter of it), every committed row is delivered, none dead, and
// every key's events reach the broker in the order they were written.
func TestThreeRelaysShareEightPartitionsAndSurviveKill9(t *testing.T) {
	t.Parallel()
	const parts = 8
	e := newEnv(t)
	if err := schema.MigratePartitioned(context.Background(), e.db.DB, "local_message", parts); err != nil {
		t.Fatal(err)
	}
	var procs []*proc
	for _, name := range []string{"relay-a", "relay-b", "relay-c"} {
		procs = append(procs, e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP="+name, "OUTBOX_RELAY_PARTITIONS=8",
			`OUTBOX_ROUTES=[{"topic":"order-events","ordered":true}]`))
	}
	var desc string
	eventually(t, 60*time.Second, "every partition owned by exactly one of three relays", func() bool {
		var ok bool
		ok, desc = partitionOwners(procs, parts)
		return ok
	})
	t.Logf("steady state: %s", desc)
	// status shows each partition's lock held, by one of the three.
	cmd := exec.Command(binary, "status")
	cmd.Env = e.environ("OUTBOX_RELAY_PARTITIONS=8")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	for p := 0; p < parts; p++ {
		if !strings.Contains(string(out), fmt.Sprintf("partition %d/%d  held by ", p, parts)) {
			t.Fatalf("status does not show partition %d held:\n%s", p, out)
		}
	}

	// The application beside them: 8 writers, a quarter of the transactions held open up to
	// 50 ms, a fifth rolled back (busyApp), on an unordered topic.
	stopApp := e.writers(t, "shop", busyApp(50))
	const keys = 40
	ctx, stopWriters := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ctx.Err() == nil; seq++ {
				var msgs []outbox.Message
				for k := w; k < keys; k += 4 {
					key := fmt.Sprintf("SN%03d", k)
					msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%06d", key, seq), Topic: "order-events",
						ShardingKey: key, Body: []byte(strconv.Itoa(seq))})
				}
				for _, m := range msgs { // one commit per event, in the key's order
					if err := e.writer.InsertNoTx(context.Background(), e.db.DB, []outbox.Message{m}); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	eventually(t, 60*time.Second, "rows delivered by three relays", func() bool { return e.count(t, "status = 2") >= 500 })

	victim := testenv.OwnedPartitions(metricsOf(procs[0]))
	killed := time.Now()
	procs[0].Kill9(t)
	eventually(t, 60*time.Second, "the survivors to own every partition", func() bool {
		var ok bool
		ok, desc = partitionOwners(procs[1:], parts)
		return ok
	})
	t.Logf("partitions %v of the killed relay taken %s after kill -9 (lock TTL %s): %s",
		victim, time.Since(killed).Round(time.Millisecond), lockTTL, desc)
	sent := e.count(t, "status = 2")
	eventually(t, 60*time.Second, "the survivors to deliver new rows", func() bool { return e.count(t, "status = 2") >= sent+500 })
	stopWriters()
	wg.Wait()
	assertLedgerDelivered(t, e, "shop", stopApp(), 60*time.Second)

	total := e.count(t, "1 = 1")
	eventually(t, 60*time.Second, "every committed row sent", func() bool { return e.count(t, "status = 2") == total })
	if n := e.count(t, "status <> 2"); n > 0 {
		t.Fatalf("%d rows not sent", n)
	}
	total = e.count(t, "topic = 'order-events'")
	msgs := e.broker.Messages("order-events")
	sortByCommitLog(msgs)
	last := map[string]int{}
	first := map[string]bool{}
	for _, m := range msgs {
		id := m.Properties[outbox.MsgIDProperty]
		if first[id] {
			continue // sent again after the kill: its ack was not written back; consumers dedupe it
		}
		first[id] = true
		key := m.Properties["SHARDING_KEY"]
		seq, _ := strconv.Atoi(string(m.Body))
		prev, seen := last[key]
		if (!seen && seq != 0) || (seen && seq != prev+1) {
			t.Fatalf("key %s: event %d delivered after %d (seen before: %v)", key, seq, prev, seen)
		}
		last[key] = seq
	}
	if len(first) != total {
		t.Fatalf("%d distinct messages on the broker, want %d", len(first), total)
	}
	t.Logf("%d rows over %d keys delivered in key order; %d sent twice after the kill", total, len(last), len(msgs)-total)
}
