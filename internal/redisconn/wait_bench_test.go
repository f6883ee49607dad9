// SPDX-License-Identifier: Apache-2.0

package redisconn_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// BenchmarkLockWriteWait measures what WAIT 1 would add to each lock acquisition or
// extension on a master with one replica (both local processes): a SET PX alone, then a
// SET PX followed by WAIT 1 100 (return once one replica has the write, or after 100 ms).
// docs/decisions.md reports the figures. Run: go test -run '^$' -bench LockWriteWait
// ./internal/redisconn/
func BenchmarkLockWriteWait(b *testing.B) {
	master := redistest.Server(b)
	replica := redistest.Server(b, "replicaof "+strings.Replace(master.Addr, ":", " ", 1))
	rc := replica.Client()
	testenv.Eventually(b, 10*time.Second, "the replica to sync", func() bool {
		info, err := rc.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	c := master.Client()
	ctx := context.Background()
	b.Run("set", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Set(ctx, "lock", "v", 2*time.Second).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("set+wait1", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := c.Set(ctx, "lock", "v", 2*time.Second).Err(); err != nil {
				b.Fatal(err)
			}
			n, err := c.Wait(ctx, 1, 100*time.Millisecond).Result()
			if err != nil || n != 1 {
				b.Fatalf("WAIT 1: %d replicas, %v", n, err)
			}
		}
	})
}
