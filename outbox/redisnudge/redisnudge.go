// SPDX-License-Identifier: Apache-2.0

// Package redisnudge wakes the relay through Redis pub/sub after a service commits outbox
// rows: it is the outbox.Nudger for relays configured with Redis (all of them, since the
// relay's leader lock lives there). It is a package of its own so that services which do
// not nudge do not import go-redis through the outbox package.
package redisnudge

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Publisher is the one method of a go-redis client that a Nudger uses: *redis.Client,
// *redis.ClusterClient and redis.UniversalClient have it.
type Publisher interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
}

// Nudger publishes on the channel where the relay of a table listens: outbox.NudgeChannelIn
// of its database when In named one (prefer that), else outbox.NudgeChannel(table). It is
// safe for concurrent use.
type Nudger struct {
	rdb      Publisher
	database string
}

var _ outbox.KeyedNudger = (*Nudger)(nil)

// New returns a Nudger publishing through rdb, which must reach the relay's Redis.
func New(rdb Publisher) *Nudger { return &Nudger{rdb: rdb} }

// In returns a Nudger that publishes on the nudge channel of database (outbox.NudgeChannelIn):
// the label of the relay's mysql.dsn, outbox.DatabaseLabel of the same DSN, as
// `outbox-relay status` prints it. Services sharing a Redis, each with a table of the same
// name, then wake only their own relay.
func (n *Nudger) In(database string) *Nudger {
	c := *n
	c.database = database
	return &c
}

// Nudge publishes one nudge for table: every partition of its relays wakes.
func (n *Nudger) Nudge(ctx context.Context, table string) error {
	return n.publish(ctx, table, "1")
}

// NudgeKeys publishes one nudge for table naming its rows' partition hashes
// (outbox.PartitionHash): a relay group of a partitioned table wakes only the partitions
// holding them. Writer.NudgeFor calls it.
func (n *Nudger) NudgeKeys(ctx context.Context, table string, hashes []uint32) error {
	return n.publish(ctx, table, outbox.NudgePayload(hashes))
}

func (n *Nudger) publish(ctx context.Context, table, payload string) error {
	if n == nil || n.rdb == nil {
		return errors.New("redisnudge: no Redis client")
	}
	ch := outbox.NudgeChannelIn(n.database, table)
	if err := n.rdb.Publish(ctx, ch, payload).Err(); err != nil {
		return fmt.Errorf("redisnudge: publish on %s: %w", ch, err)
	}
	return nil
}
