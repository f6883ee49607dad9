// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// TestOverviewTopicsAreCapped: 5,000 dead topics (forged tombstones, say) and a few real
// ones are listed as the 50 largest counts plus one "(N other topics)" count per status,
// which keeps every row counted.
func TestOverviewTopicsAreCapped(t *testing.T) {
	var list []ops.TopicCount
	var total int64
	for i := 0; i < 5000; i++ {
		list = append(list, ops.TopicCount{Status: "dead", Topic: fmt.Sprintf("forged-%04d", i), Deleted: true, Count: 1})
	}
	for i := 0; i < 3; i++ {
		list = append(list, ops.TopicCount{Status: "pending", Topic: fmt.Sprintf("orders-%d", i), Count: int64(100 + i)})
	}
	for _, tc := range list {
		total += tc.Count
	}
	got := capTopics(list, maxOverviewTopics)
	if len(got) > maxOverviewTopics+1 {
		t.Fatalf("%d counts listed, want at most %d and one other", len(got), maxOverviewTopics)
	}
	var sum int64
	pending := 0
	for _, tc := range got {
		sum += tc.Count
		if tc.Status == "pending" {
			pending++
		}
	}
	if sum != total {
		t.Errorf("the capped counts sum to %d, want %d", sum, total)
	}
	if pending != 3 {
		t.Errorf("%d of the 3 largest (pending) topics listed", pending)
	}
	if last := got[len(got)-1]; last.Topic != "(4953 other topics)" || last.Count != 4953 || last.Status != "dead" {
		t.Errorf("folded count: %+v", last)
	}
}
