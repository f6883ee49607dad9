// SPDX-License-Identifier: Apache-2.0

package schema_test

import (
	"context"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestPartitionColumnLifecycle: migrate adds the partition column online to a table with
// rows, every row lands in the partition of its sharding key (msg_id when empty), a relay
// configured for another number of partitions finds the table not ready, and migrating
// again changes the number of partitions or removes the column.
func TestPartitionColumnLifecycle(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		key := ""
		if i%2 == 0 {
			key = fmt.Sprintf("order-%d", i)
		}
		if _, err := db.Exec("INSERT INTO local_message (msg_id, topic, content, sharding_key) VALUES (?, 't', 'b', ?)", fmt.Sprintf("m%d", i), key); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []int{8, 3, 1} {
		steps, err := schema.PlanPartitioned(ctx, db.DB, "local_message", p)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range steps {
			if !st.Online {
				t.Fatalf("partitions=%d: step %q is not online", p, st.SQL)
			}
		}
		// Applied without allowing blocking steps: a table with rows takes them online.
		if err := schema.Apply(ctx, db.DB, "local_message", steps, false); err != nil {
			t.Fatalf("partitions=%d: %v", p, err)
		}
		if got, err := schema.Partitions(ctx, db.DB, "local_message"); err != nil || got != p {
			t.Fatalf("Partitions after migrating to %d = %d, %v", p, got, err)
		}
		if problems, err := schema.CheckPartitioned(ctx, db.DB, "local_message", p); err != nil || len(problems) > 0 {
			t.Fatalf("CheckPartitioned(%d) after migrate = %v, %v", p, problems, err)
		}
		other := 4
		if problems, err := schema.CheckPartitioned(ctx, db.DB, "local_message", other); err != nil || len(problems) == 0 {
			t.Fatalf("CheckPartitioned(%d) on a table of %d partitions = %v, %v; want a problem", other, p, problems, err)
		}
		if p == 1 {
			continue
		}
		rows, err := db.Query("SELECT msg_id, sharding_key, relay_partition FROM local_message")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var msgID, key string
			var part int
			if err := rows.Scan(&msgID, &key, &part); err != nil {
				t.Fatal(err)
			}
			h := key
			if h == "" {
				h = msgID
			}
			if want := int(crc32.ChecksumIEEE([]byte(h)) % uint32(p)); part != want {
				t.Errorf("row %s (key %q) in partition %d of %d, want %d", msgID, key, part, p, want)
			}
		}
		rows.Close()
	}
	if problems, err := schema.Check(ctx, db.DB, "local_message"); err != nil || len(problems) > 0 {
		t.Fatalf("Check after going back to one partition = %v, %v", problems, err)
	}
}

// TestForeignPartitionColumnIsRefused: a column named relay_partition that migrate did not
// make is reported, never dropped.
func TestForeignPartitionColumnIsRefused(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	ctx := context.Background()
	if err := schema.Migrate(ctx, db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ALTER TABLE local_message ADD COLUMN relay_partition int NOT NULL DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.PlanPartitioned(ctx, db.DB, "local_message", 8); err == nil {
		t.Fatal("PlanPartitioned over a foreign relay_partition column succeeded")
	}
}
