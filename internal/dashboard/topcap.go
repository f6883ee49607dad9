// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// maxOverviewTopics bounds the (status, topic) counts an overview lists per table: topics
// are written by whoever writes rows (and by forged transactional checks, whose tombstones
// carry the forged half's topic), so without a bound the overview, which anyone may fetch
// and re-fetch, grows with them.
const maxOverviewTopics = 50

// capTopics keeps the n largest counts of list and folds the others into one count per
// status (and deleted flag) named "(N other topics)"; the result is in list's order, the
// folded counts last.
func capTopics(list []ops.TopicCount, n int) []ops.TopicCount {
	if len(list) <= n {
		return list
	}
	order := make([]int, len(list))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(list[b].Count, list[a].Count) })
	keep := make([]bool, len(list))
	for _, i := range order[:n] {
		keep[i] = true
	}
	type group struct {
		status  string
		deleted bool
	}
	other := map[group]*ops.TopicCount{}
	var groups []group
	out := make([]ops.TopicCount, 0, n+4)
	topics := map[group]int{}
	for i, tc := range list {
		if keep[i] {
			out = append(out, tc)
			continue
		}
		g := group{tc.Status, tc.Deleted}
		if other[g] == nil {
			other[g] = &ops.TopicCount{Status: tc.Status, Deleted: tc.Deleted}
			groups = append(groups, g)
		}
		other[g].Count += tc.Count
		topics[g]++
	}
	for _, g := range groups {
		o := *other[g]
		o.Topic = fmt.Sprintf("(%d other topics)", topics[g])
		out = append(out, o)
	}
	return out
}
