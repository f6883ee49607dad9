// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Group relays one table split into Config.Partitions partitions, each under its own lock,
// and shares them with the other relays running the same table: each process holds about
// P/N of the P partitions when N relays run. The relays find each other through a sorted set
// in Redis, the only coordinator: every quarter of the lock TTL each one renews its entry,
// drops the entries not renewed for half a TTL, and computes the same assignment from the
// members it sees. A partition moves when its assignment changes: its holder finishes the
// sends in flight, writes them back and releases the lock, and the new owner takes it.
// With Partitions = 1 every relay of the group competes for the table's one lock, as
// before partitions existed; the membership only keeps relays with another number of
// partitions from publishing beside them.
type Group struct {
	cfg     Config
	rdb     redis.UniversalClient
	parts   []*Relay
	member  string
	members string // the Redis key of the group's sorted set
	log     zerolog.Logger

	mu       sync.Mutex
	assigned []int    // partitions this process is to hold, as last computed
	seen     []string // live members, as last read
	conflict string   // a member with another number of partitions, if any
	renewErr error    // why the last membership renewal failed; nil after a success
}

// NewGroup checks cfg and returns the group of cfg.Table's cfg.Partitions partitions. The
// lock of partition p is cfg.LockKey followed by ":p/P"; the members' set is cfg.LockKey
// followed by ":members".
func NewGroup(db *sql.DB, rdb redis.UniversalClient, pub Publisher, cfg Config) (*Group, error) {
	cfg.setDefaults()
	g := &Group{cfg: cfg, rdb: rdb, members: cfg.LockKey + ":members"}
	for p := 0; p < cfg.Partitions; p++ {
		pc := cfg
		pc.Partition = p
		pc.layoutKey = cfg.LockKey + ":layout"
		if cfg.Partitions > 1 {
			pc.LockKey = PartitionLockKey(cfg.LockKey, p, cfg.Partitions)
		}
		r, err := New(db, rdb, pub, pc)
		if err != nil {
			return nil, err
		}
		r.gate = &gate{changed: make(chan struct{}, 1)}
		r.nudgeIn = make(chan struct{}, 1)
		g.parts = append(g.parts, r)
	}
	if cfg.Partitions > 1 {
		for p, r := range g.parts {
			r.sawWork = func() { g.wakeOthers(p) }
		}
	}
	host, _ := os.Hostname()
	token := make([]byte, 6)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("relay: group member id: %w", err)
	}
	// The number of partitions leads the member's name: relays configured with different
	// numbers would split the rows two ways and publish some twice, so only those with the
	// oldest member's number hold partitions.
	g.member = fmt.Sprintf("%d|since=%d host=%s pid=%d token=%s", cfg.Partitions, time.Now().UnixMilli(), host, os.Getpid(), hex.EncodeToString(token))
	g.log = g.parts[0].log.With().Str("member", g.member).Logger()
	if cfg.Partitions > 1 {
		g.parts[0].metrics.InitPartitions(cfg.Partitions)
	}
	return g, nil
}

// PartitionLockKey is the lock key of partition p of n, for a table whose lock key is key.
func PartitionLockKey(key string, p, n int) string { return fmt.Sprintf("%s:%d/%d", key, p, n) }

// Relays returns the group's relays, one per partition.
func (g *Group) Relays() []*Relay { return slices.Clone(g.parts) }

// MembershipError returns why the last renewal of this relay's group membership in Redis
// failed (a missing ACL permission, Redis down), or nil. While it fails the relay is assigned
// nothing and waits for no lock.
func (g *Group) MembershipError() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewErr
}

// Members returns how many relays of the group this process saw in Redis at its last
// renewal, whatever their number of partitions.
func (g *Group) Members() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

// Owned returns the partitions whose lock this process holds.
func (g *Group) Owned() []int {
	var out []int
	for p, r := range g.parts {
		if r.leading.Load() {
			out = append(out, p)
		}
	}
	return out
}

// Run relays the group's partitions until ctx ends, then leaves the group (the others take
// its partitions at once) and returns nil. Any other return is an error of configuration.
func (g *Group) Run(ctx context.Context) error {
	if g.rdb == nil {
		return errors.New("relay: Group.Run needs a Redis client")
	}
	// The group's services, for the whole of Run: the nudge listener, the backlog sampler and
	// the partitions' relays, started in that order and stopped in the reverse once ctx ends
	// (each relay finishing its sends and releasing its lock), before the group is left.
	services := g.services()
	if err := startstop.StartAll(ctx, services...); err != nil {
		return err
	}
	g.coordinate(ctx)
	slices.Reverse(services)
	startstop.StopAll(services...)
	lctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := g.rdb.ZRem(lctx, g.members, g.member).Err(); err != nil {
		g.log.Warn().Err(err).Msg("group: could not leave; the others notice within lock.ttl")
	}
	return nil
}

// services are the group's services in the order they start: the listener that forwards the
// table's nudges, from one subscription, to every partition (none with nudges disabled), the
// backlog sampler, and one service per partition running its relay.
func (g *Group) services() []startstop.Service {
	var services []startstop.Service
	if !g.cfg.DisableNudge {
		outs := make([]chan struct{}, len(g.parts))
		for i, r := range g.parts {
			outs[i] = r.nudgeIn
		}
		services = append(services, nudgeListener(g.rdb, g.cfg.Database, g.cfg.Table, outs))
	}
	services = append(services, startstop.New(func(ctx context.Context) { g.sampleBacklogEvery(ctx, 5*time.Second) }))
	for _, r := range g.parts {
		services = append(services, startstop.New(func(ctx context.Context) { _ = r.Run(ctx) }))
	}
	return services
}

// coordinate renews the membership and applies the assignment every quarter of the lock
// TTL until ctx ends.
func (g *Group) coordinate(ctx context.Context) {
	tick := time.NewTicker(g.cfg.LockTTL / 4)
	defer tick.Stop()
	for {
		g.heartbeat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// membership renews member's entry, drops the entries not renewed for ARGV[2] ms (by the
// Redis server's clock, so the relays' clocks do not matter) and returns the live members.
var membership = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], 4 * tonumber(ARGV[2]))
return redis.call('ZRANGE', KEYS[1], 0, -1)
`)

// heartbeat renews the membership and opens or closes each partition's gate. When Redis
// does not answer the gates stay as they are: the partitions' locks cannot be extended
// either, and their relays stop on their own when the locks' validity runs out.
func (g *Group) heartbeat(ctx context.Context) {
	hctx, cancel := context.WithTimeout(ctx, g.cfg.LockTTL/4)
	members, err := membership.Run(hctx, g.rdb, []string{g.members}, g.member, memberTTL(g.cfg.LockTTL).Milliseconds()).StringSlice()
	cancel()
	g.mu.Lock()
	g.renewErr = err
	g.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn().Err(err).Msg("group: membership not renewed")
		}
		return
	}
	conflict, peers := g.conflicting(members)
	var mine []int
	switch {
	case conflict != "":
	case g.cfg.Partitions == 1:
		mine = []int{0} // every relay competes for the one lock
	default:
		mine = assign(peers, g.cfg.Partitions)[g.member]
	}
	g.mu.Lock()
	changed := !slices.Equal(mine, g.assigned) || len(members) != len(g.seen) || conflict != g.conflict
	g.assigned, g.seen = mine, members
	newConflict := conflict != "" && conflict != g.conflict
	g.conflict = conflict
	g.mu.Unlock()
	g.parts[0].metrics.SetGroupMembers(len(members))
	if newConflict {
		g.log.Error().Str("other", conflict).Int("partitions", g.cfg.Partitions).
			Msg("group: an older relay of this table runs with another relay.partitions; this one holds no partition until every relay has the same")
	}
	if changed {
		g.log.Info().Ints("partitions", mine).Int("members", len(members)).Msg("group: assignment")
	}
	own := make([]bool, len(g.parts))
	for _, p := range mine {
		own[p] = true
	}
	for p, r := range g.parts {
		r.gate.set(own[p])
	}
}

// conflicting returns the oldest member when its number of partitions is not ours (else
// ""), and the members with our number, among whom the partitions are shared. The oldest
// configuration wins so that a relay started with another number cannot stop a group that
// is delivering; when the number is changed on purpose, the new relays wait for the last old
// one to stop.
func (g *Group) conflicting(members []string) (conflict string, peers []string) {
	oldest, oldestSince := "", int64(0)
	ours := strconv.Itoa(g.cfg.Partitions)
	for _, m := range members {
		var n int
		var since int64
		if _, err := fmt.Sscanf(m, "%d|since=%d", &n, &since); err != nil {
			continue // not a member written by this version
		}
		if strconv.Itoa(n) == ours {
			peers = append(peers, m)
		}
		if oldest == "" || since < oldestSince || (since == oldestSince && m < oldest) {
			oldest, oldestSince = m, since
		}
	}
	if n, _, _ := strings.Cut(oldest, "|"); oldest != "" && n != ours {
		return oldest, nil
	}
	return "", peers
}

// memberTTL is how long a member stays in the group without renewing its entry: two missed
// renewals. Shorter than the lock's TTL, so that the survivors of a dead relay know its
// partitions are theirs before its locks expire, and take each within milliseconds of its
// expiry (Relay.lockExpiry). A relay paused longer drops out of the others' assignment for
// a moment; it holds its locks meanwhile, so nothing moves unless it loses them.
func memberTTL(lockTTL time.Duration) time.Duration { return lockTTL / 2 }

// sampleBacklogEvery samples the table's backlog and dead rows until ctx is done. With one
// partition every relay samples, leader and standbys alike, as before partitions. With
// several, only the holder of partition 0 does and the others export 0: sixteen relays
// counting a large backlog every 5 s would load the database for one number, and the
// alerts aggregate with max.
func (g *Group) sampleBacklogEvery(ctx context.Context, every time.Duration) {
	first := g.parts[0]
	if first.metrics == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	// outbox_relay_lock_wait_seconds: how long this process has gone without partition 0's
	// lock (the whole table's with one partition), so that OutboxRelayLockWaitLong (the
	// minimum over the table's relays above a minute) fires when no relay holds it.
	lastLed := time.Now()
	for {
		if first.leading.Load() {
			lastLed = time.Now()
			first.metrics.SetLockWait(0)
		} else {
			first.metrics.SetLockWait(time.Since(lastLed))
		}
		if g.cfg.Partitions == 1 || first.leading.Load() {
			first.sampleBacklog(ctx)
		} else {
			first.metrics.SetBacklog(0, 0)
			first.metrics.SetDeadRows(0)
			first.metrics.SetUnknownRows(0)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wakeOthers wakes every partition but p that this process holds, as a plain nudge does:
// each runs one probe, and a pass if it finds rows. The channels hold one signal each, so a
// busy table costs at most one probe per partition per pass of another.
func (g *Group) wakeOthers(p int) {
	for i, r := range g.parts {
		if i != p && r.leading.Load() {
			select {
			case r.nudgeIn <- struct{}{}:
			default:
			}
		}
	}
}

// nudgeChannels are the channels a table's relay listens on: its database's, and the one
// without a database that writers of earlier versions (and those naming none) publish on.
func nudgeChannels(database, table string) []string {
	if database == "" {
		return []string{outbox.NudgeChannel(table)}
	}
	return []string{outbox.NudgeChannelIn(database, table), outbox.NudgeChannel(table)}
}

// assign shares n partitions among members, the same way in every process: each member
// gets n/len(members) partitions, or one more (the first n%len(members) members in sorted
// order), and each partition goes to the member that ranks it highest (a hash of member and
// partition) among those not yet full. A member joining or leaving moves few partitions
// besides its own: the rest keep their owner unless its share changed.
func assign(members []string, n int) map[string][]int {
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	out := map[string][]int{}
	if len(members) == 0 {
		return out
	}
	capacity := map[string]int{}
	for i, m := range members {
		capacity[m] = n / len(members)
		if i < n%len(members) {
			capacity[m]++
		}
	}
	ranked := make([]string, len(members))
	for p := 0; p < n; p++ {
		copy(ranked, members)
		slices.SortFunc(ranked, func(a, b string) int {
			ha, hb := rank(a, p), rank(b, p)
			switch {
			case ha > hb:
				return -1
			case ha < hb:
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, m := range ranked {
			if len(out[m]) < capacity[m] {
				out[m] = append(out[m], p)
				break
			}
		}
	}
	return out
}

// rank is member's preference for partition p.
func rank(member string, p int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0, byte(p >> 8), byte(p)})
	x := h.Sum64()
	// fnv's low bits mix poorly over short suffixes: finish with a 64-bit mixer.
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}

// gate tells a partition's relay whether its process should hold the partition. All its
// methods are safe on a nil gate (an unpartitioned relay), which always wants the lock.
type gate struct {
	want    atomic.Bool
	changed chan struct{} // holds one signal after want changed
}

func (g *gate) wanted() bool { return g == nil || g.want.Load() }

func (g *gate) set(on bool) {
	if g.want.Swap(on) != on {
		select {
		case g.changed <- struct{}{}:
		default:
		}
	}
}

// changedChan is the channel signalled when want changes; nil (never ready) for a nil gate.
func (g *gate) changedChan() <-chan struct{} {
	if g == nil {
		return nil
	}
	return g.changed
}
