package relay

import (
	"fmt"
	"testing"
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
