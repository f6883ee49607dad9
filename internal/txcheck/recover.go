// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"errors"
	"slices"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// discardTopic is where a broker writes a half it checked transactionCheckMax times without
// an answer (one queue, 0, on each broker); such a half is never delivered.
const discardTopic = "TRANS_CHECK_MAX_TIME_TOPIC"

// recoverDiscarded reads every master's discarded halves from where this process last
// stopped (from the start after a restart) and makes the handed row of each half of a
// check group pending again, so that the relay delivers it: nothing else ever would. It is
// idempotent (the change is guarded by status 4), so every relay process runs it. A half
// whose row cannot be read yet (the database, or a writer's transaction still holding the
// row) stops the walk of its broker there, to be read again at the next sweep.
func (r *Responder) recoverDiscarded(ctx context.Context) {
	r.mu.Lock()
	conns := make(map[string]*remoting.Conn, len(r.conns))
	for a, c := range r.conns {
		conns[a] = c
	}
	r.mu.Unlock()
	for addr, c := range conns {
		r.mu.Lock()
		off := r.discardAt[addr]
		r.mu.Unlock()
		off = r.recoverFrom(ctx, c, off)
		r.mu.Lock()
		r.discardAt[addr] = off
		r.mu.Unlock()
	}
}

// recoverFrom walks one broker's discarded halves from off and returns where it stopped.
func (r *Responder) recoverFrom(ctx context.Context, c *remoting.Conn, off int64) int64 {
	log := r.cfg.Logger
	for ctx.Err() == nil {
		p, err := c.Pull(ctx, r.cfg.DiscardGroup, discardTopic, 0, off, 32)
		if errors.Is(err, remoting.ErrTopicNotExist) {
			return off // nothing was ever discarded there
		}
		if err != nil {
			log.Warn().Err(err).Str("broker", c.Addr()).Msg("transactional checks: reading the discarded halves failed; retrying at the next sweep")
			return off
		}
		if len(p.Messages) == 0 {
			return p.Next
		}
		for _, m := range p.Messages {
			if !r.requeueDiscarded(ctx, m) {
				return off
			}
			off = m.QueueOffset + 1
		}
	}
	return off
}

// requeueDiscarded makes the handed row of a discarded half pending and due now. It reports
// false when the row could not be read, so that the half is read again later.
func (r *Responder) requeueDiscarded(ctx context.Context, m *remoting.Message) bool {
	group, id := m.Properties["PGROUP"], m.Properties[outbox.MsgIDProperty]
	if id == "" || !slices.Contains(r.cfg.Groups, group) {
		return true // not a half of ours
	}
	table, ok := r.dec.table(m.Properties)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	st, _, _, found, err := r.dec.probe(ctx, table, id)
	switch {
	case err != nil:
		r.cfg.Logger.Warn().Err(err).Str("msg_id", id).Msg("transactional checks: a discarded half's row could not be read (a writer's transaction may still hold it); retrying at the next sweep")
		return false
	case !found || st != int(outbox.StatusHanded):
		return true // rolled back, sent, or already the relay's
	}
	q := "UPDATE " + schema.QuoteIdent(table) + " SET status = 0, next_retry_time = 0, fail_reason = ? WHERE msg_id = ? AND status = 4"
	res, err := r.dec.db.ExecContext(ctx, q, "half discarded by the broker after "+m.Properties[checkTimesProperty]+" checks; sent by the relay", id)
	if err != nil {
		r.cfg.Logger.Warn().Err(err).Str("msg_id", id).Msg("transactional checks: a discarded half's row could not be requeued; retrying at the next sweep")
		return false
	}
	if n, _ := res.RowsAffected(); n == 1 {
		r.metrics.Recovered(group)
		r.cfg.Logger.Warn().Str("group", group).Str("msg_id", id).Str("table", table).
			Msg("transactional checks: the broker discarded a handed row's half; the relay sends the row")
		if r.dec.release != nil {
			r.dec.release(ctx, table)
		}
	}
	return true
}
