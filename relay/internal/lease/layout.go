// SPDX-License-Identifier: Apache-2.0

package lease

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// One layout of partitions at a time. Relays configured with another relay.partitions take
// other lock keys (<lock.key>:p/P), so their locks alone do not keep them from publishing
// the same rows at once. The group's membership keeps a new layout waiting while the old
// relays are members, but a member that misses two renewals (a Redis blip) drops out while
// it still holds its locks, and a relay of the new layout would start beside it. The layout
// key is the fence: every lock holder sets it to its number of partitions when it takes or
// extends its lock, with the lock's TTL, and no relay takes a lock while the key holds
// another number. It expires after the lock of the last holder of the old layout: a relay
// of the new layout takes its first lock only when no relay of the old one can still
// publish.

// fenceLayout sets the layout key to partitions for ttl unless it holds another number; it
// returns the number it holds.
var fenceLayout = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return v end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
`)

// claimLayout claims the table's layout for this relay's number of partitions. It returns
// the number of partitions of the relays holding the layout when it is not ours (0 when it
// is ours), or the error of Redis.
func (l *Lease) claimLayout(ctx context.Context) (int, error) {
	ours := strconv.Itoa(l.cfg.Partitions)
	ctx, cancel := context.WithTimeout(ctx, l.cfg.TTL/4)
	defer cancel()
	got, err := fenceLayout.Run(ctx, l.cfg.Client, []string{l.cfg.LayoutKey}, ours, l.cfg.TTL.Milliseconds()).Text()
	if err != nil {
		return 0, err
	}
	if got == ours {
		return 0, nil
	}
	n, err := strconv.Atoi(got)
	if err != nil {
		n = -1 // not written by a relay: someone else's key
	}
	return n, nil
}
