// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"errors"
	"slices"
	"strconv"

	"github.com/rs/zerolog"

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
			if !r.requeueDiscarded(ctx, c, m) {
				return off
			}
			off = m.QueueOffset + 1
		}
	}
	return off
}

// requeueDiscarded makes the handed row of a discarded half pending and due now, when the
// half is authenticated and its row's, the half was seen discarded at least DiscardSettle
// ago (by the database's clock), and its broker holds no committed copy of it: a late
// COMMIT to the half's last check (its writer's, or a relay's) still commits a discarded
// half, and the relay's send as well would deliver it twice. It reports false when the half
// must be read again at a later sweep (too recent, or the row or the broker did not answer).
func (r *Responder) requeueDiscarded(ctx context.Context, c *remoting.Conn, m *remoting.Message) bool {
	group, id, topic := m.Properties["PGROUP"], m.Properties[outbox.MsgIDProperty], m.Properties["REAL_TOPIC"]
	if id == "" || !slices.Contains(r.cfg.Groups, group) {
		return true // not a half of ours
	}
	table, ok := r.dec.table(m.Properties)
	if !ok || !outbox.VerifyHalf(r.cfg.Secrets, m.Properties[outbox.SignatureProperty], table, id, topic) {
		return true // not a half of ours, or forged
	}
	log := r.cfg.Logger.With().Str("group", group).Str("msg_id", id).Str("table", table).Logger()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	row, found, err := r.dec.probe(ctx, table, id)
	switch {
	case err != nil:
		log.Warn().Err(err).Msg("transactional checks: a discarded half's row could not be read (a writer's transaction may still hold it); retrying at the next sweep")
		return false
	case !found || row.status != int(outbox.StatusHanded) || !row.matches(id, Check{Topic: topic, Properties: m.Properties}):
		return true // rolled back, sent, already the relay's, or not this half's row
	}
	key := c.Addr() + "/" + strconv.FormatInt(m.QueueOffset, 10)
	r.mu.Lock()
	seen, ok := r.discardSeen[key]
	if !ok {
		r.discardSeen[key], seen = row.nowMs, row.nowMs
	}
	r.mu.Unlock()
	if row.nowMs-seen < r.cfg.DiscardSettle.Milliseconds() {
		return false // a late answer to the half's last check may still commit it
	}
	stored, err := c.Stored(ctx, topic, m.Properties["UNIQ_KEY"])
	if errors.Is(err, remoting.ErrNoPermission) {
		// Waiting for a permission no one may ever grant would keep the message from every
		// consumer: send it, and say what the lookup needs (a duplicate at worst).
		log.Error().Err(err).Msg("transactional checks: the broker refuses this relay's lookup of a discarded half (grant its user Sub on the topic); sending the row without knowing whether a late COMMIT stored it")
		err, stored = nil, false
	}
	if err != nil {
		log.Warn().Err(err).Msg("transactional checks: could not ask the broker whether a discarded half was committed; retrying at the next sweep")
		return false
	}
	r.mu.Lock()
	delete(r.discardSeen, key)
	r.mu.Unlock()
	if stored {
		log.Info().Msg("transactional checks: a discarded half was committed after all (a late answer to its last check); the row is left handed")
		return true
	}
	return r.requeue(ctx, log, group, table, id, m.Properties[checkTimesProperty])
}

// requeue makes a handed row pending and due now, guarded by status 4.
func (r *Responder) requeue(ctx context.Context, log zerolog.Logger, group, table, id, checks string) bool {
	q := "UPDATE " + schema.QuoteIdent(table) + " SET status = 0, next_retry_time = 0, fail_reason = ? WHERE msg_id = ? AND status = 4"
	res, err := r.dec.db.ExecContext(ctx, q, "half discarded by the broker after "+checks+" checks and not committed; sent by the relay", id)
	if err != nil {
		log.Warn().Err(err).Msg("transactional checks: a discarded half's row could not be requeued; retrying at the next sweep")
		return false
	}
	if n, _ := res.RowsAffected(); n == 1 {
		r.metrics.Recovered(group)
		log.Warn().Msg("transactional checks: the broker discarded a handed row's half; the relay sends the row")
		if r.dec.release != nil {
			r.dec.release(ctx, table)
		}
	}
	return true
}
