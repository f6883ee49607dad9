// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/storedlog"
)

// step checks the rows of the next journal entries of w after cur (about a batch of rows),
// writing the verdicts back at nowMs (the database's clock, read by the caller for the
// window), and returns where the next step starts, and done once w has no entries left.
// With repair, the entries whose rows are all settled (present, repaired, sent again since,
// or gone) are marked audited in one statement; an entry with a row the broker could not
// answer for is left to be checked again.
func (a *Auditor) step(ctx context.Context, w window, cur storedlog.Cursor, repair bool, nowMs int64) (Report, storedlog.Cursor, bool, error) {
	limit := a.entryLimit()
	entries, err := a.st.entries(ctx, w, cur, limit)
	if err != nil || len(entries) == 0 {
		return Report{}, cur, true, err
	}
	done := len(entries) < limit
	if n := a.take(entries); n < len(entries) {
		entries, done = entries[:n], false
	}
	rep, open, err := a.checkEntries(ctx, entries, w.topic, repair, nowMs)
	if err != nil {
		return rep, cur, true, err
	}
	if repair {
		var seqs []int64
		for i, e := range entries {
			if !open[i] {
				seqs = append(seqs, e.Seq)
			}
		}
		if err := a.st.markAudited(ctx, seqs, nowMs); err != nil {
			return rep, cur, true, err
		}
	}
	last := entries[len(entries)-1]
	return rep, storedlog.Cursor{SettledMs: last.SettledMs, Seq: last.Seq}, done, nil
}

// entryLimit is how many entries a step reads: about a batch of rows, by the rows per
// entry the last step found.
func (a *Auditor) entryLimit() int {
	per := max(a.perEntry.Load(), 1)
	return int(min(int64(a.cfg.Batch), int64(a.cfg.Batch)/per+2))
}

// take returns how many of entries a step checks: at least one, and no more once they
// hold a batch of rows.
func (a *Auditor) take(entries []storedlog.Entry) int {
	n, rows := 0, 0
	for n < len(entries) && (n == 0 || rows < a.cfg.Batch) {
		rows += len(entries[n].Positions)
		n++
	}
	a.perEntry.Store(int64(max(rows/n, 1)))
	return n
}

// item is one position of a step's entries.
type item struct {
	entry int
	pos   storedlog.Pos
}

// checkEntries checks the rows of entries, a batch of rows at a time (one read of the rows,
// one lookup, at most one repair each), at the configured rate, and returns what it found
// and which entries are still open (open[i] for entries[i]): a row the broker could not
// answer for, or not of topic. An entry that does not decode is counted, logged and closed.
func (a *Auditor) checkEntries(ctx context.Context, entries []storedlog.Entry, topic string, repair bool, nowMs int64) (Report, []bool, error) {
	var rep Report
	open := make([]bool, len(entries))
	var items []item
	for i, e := range entries {
		if e.Err != nil {
			rep.Corrupt++
			a.cfg.Log.Error().Err(e.Err).Str("database", a.cfg.Database).Str("table", a.cfg.Table).
				Msg("broker audit: a journal entry does not decode; its rows are not checked")
			continue
		}
		for _, p := range e.Positions {
			items = append(items, item{i, p})
		}
	}
	for start := 0; start < len(items); start += a.cfg.Batch {
		chunk := items[start:min(start+a.cfg.Batch, len(items))]
		r, err := a.checkItems(ctx, entries, chunk, topic, repair, nowMs, open)
		rep.add(r)
		if err != nil {
			return rep, open, err
		}
	}
	return rep, open, nil
}

// checkItems checks one batch of positions of entries: the rows still sent by the send
// their entry recorded (next_retry_time equal to its settled time; any other was sent
// again, or purged, and is settled), of topic unless empty. It marks in open the entries
// of rows left to check again.
func (a *Auditor) checkItems(ctx context.Context, entries []storedlog.Entry, chunk []item, topic string, repair bool, nowMs int64, open []bool) (Report, error) {
	ids := make([]int64, len(chunk))
	for i, it := range chunk {
		ids[i] = it.pos.ID
	}
	rows, err := a.st.rows(ctx, ids)
	if err != nil {
		return Report{}, err
	}
	var cands []candidate
	for _, it := range chunk {
		r, ok := rows[it.pos.ID]
		switch {
		case !ok || r.settled != entries[it.entry].SettledMs:
			continue
		case topic != "" && r.topic != topic:
			open[it.entry] = true
			continue
		}
		p := it.pos
		cands = append(cands, candidate{id: p.ID, msgID: r.msgID, topic: r.topic, tag: r.tag, key: r.key, broker: p.Broker,
			queue: p.QueueID, offset: p.Offset, settled: r.settled, commitOffset: p.CommitOffset, entry: it.entry})
	}
	if len(cands) == 0 {
		return Report{}, nil
	}
	rep, unknown, err := a.checkBatch(ctx, cands, repair, nowMs)
	for i, u := range unknown {
		if u {
			open[cands[i].entry] = true
		}
	}
	if err != nil {
		return rep, err
	}
	if !a.cfg.Sleep(ctx, time.Duration(float64(len(cands))/a.cfg.Rate*float64(time.Second))) {
		return rep, ctx.Err()
	}
	return rep, nil
}
