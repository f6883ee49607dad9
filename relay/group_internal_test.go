// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestAssignSharesEvenlyAndMovesLittle: every partition has exactly one owner, shares differ
// by at most one, and when a member leaves only its partitions and a few others move.
func TestAssignSharesEvenlyAndMovesLittle(t *testing.T) {
	for _, n := range []int{8, 64} {
		for members := 1; members <= 16; members++ {
			var ms []string
			for i := 0; i < members; i++ {
				ms = append(ms, fmt.Sprintf("%d|host=h%d pid=%d token=%02x", n, i, 100+i, i))
			}
			a := assign(ms, n)
			owner := map[int]string{}
			for m, ps := range a {
				if len(ps) < n/members || len(ps) > n/members+1 {
					t.Errorf("n=%d members=%d: %s holds %d partitions", n, members, m, len(ps))
				}
				for _, p := range ps {
					if o, dup := owner[p]; dup {
						t.Fatalf("n=%d members=%d: partition %d held by %s and %s", n, members, p, o, m)
					}
					owner[p] = m
				}
			}
			if len(owner) != n {
				t.Fatalf("n=%d members=%d: %d partitions owned, want %d", n, members, len(owner), n)
			}
			if members == 1 {
				continue
			}
			gone := ms[members/2]
			b := assign(append(append([]string{}, ms[:members/2]...), ms[members/2+1:]...), n)
			moved := 0
			for m, ps := range b {
				for _, p := range ps {
					if owner[p] != m && owner[p] != gone {
						moved++
					}
				}
			}
			// Besides the leaver's partitions, at most one partition per remaining member
			// moves (the shares grow by at most one each).
			if moved > members-1 {
				t.Errorf("n=%d members=%d: %d partitions of remaining members moved when one left", n, members, moved)
			}
		}
	}
}

// TestNudgesNamingTheirRowsWakeOnlyTheirPartitions: a nudge that names its rows' partition
// hashes (outbox.NudgePayload) signals only those partitions; a plain one signals all.
func TestNudgesNamingTheirRowsWakeOnlyTheirPartitions(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	channel := prefix + "nudges"
	sub := rdb.Subscribe(ctx, channel)
	if _, err := sub.Receive(ctx); err != nil { // the subscription is confirmed
		t.Fatal(err)
	}
	outs := make([]chan struct{}, 4)
	for i := range outs {
		outs[i] = make(chan struct{}, 1)
	}
	go forwardNudges(ctx, sub, outs)
	publish := func(payload string) {
		t.Helper()
		if err := rdb.Publish(ctx, channel, payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	signalled := func(i int) bool {
		select {
		case <-outs[i]:
			return true
		default:
			return false
		}
	}
	// Hashes 5 and 10 are partitions 1 and 2 of 4. The nudges are forwarded in order, so once
	// the second one (partition 3 alone) arrived the first was forwarded in full.
	publish(outbox.NudgePayload([]uint32{5, 10}))
	publish(outbox.NudgePayload([]uint32{3}))
	testenv.Eventually(t, 10*time.Second, "the second keyed nudge", func() bool { return signalled(3) })
	var got []int
	for i := 0; i < 3; i++ {
		if signalled(i) {
			got = append(got, i)
		}
	}
	if fmt.Sprint(got) != "[1 2]" {
		t.Fatalf("a nudge naming partitions 1 and 2 woke %v", got)
	}
	publish("1")
	woken := map[int]bool{}
	testenv.Eventually(t, 10*time.Second, "a plain nudge to wake every partition", func() bool {
		for i := range outs {
			if signalled(i) {
				woken[i] = true
			}
		}
		return len(woken) == len(outs)
	})
	// The writer's hash is the one the table's column computes (checked in SQL by schema's
	// TestPartitionColumnLifecycle): CRC32 of the sharding key, else of the msg_id.
	if outbox.PartitionHash("", "m1") != outbox.PartitionHash("m1", "other") {
		t.Fatal("PartitionHash: an empty key does not fall back to the msg_id")
	}
}
