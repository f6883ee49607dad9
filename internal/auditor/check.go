// SPDX-License-Identifier: Apache-2.0

package auditor

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/storedlog"
)

// checkBatch looks cands up and, with repair, makes the missing ones due again at nowMs
// (the database's clock) in one statement with each row's reason. Present rows write
// nothing; Unknown rows are only counted, and reported in unknown (unknown[i] for cands[i])
// so that their entries stay to be checked again.
func (a *Auditor) checkBatch(ctx context.Context, cands []candidate, repair bool, nowMs int64) (rep Report, unknown []bool, err error) {
	ps := make([]brokeraudit.Position, len(cands))
	for i, c := range cands {
		ps[i] = c.position()
		if a.cfg.Namespace != "" {
			ps[i].Topic = a.cfg.Namespace + "%" + c.topic
		}
	}
	found, err := a.lookup.Check(ctx, ps)
	if err != nil {
		return Report{}, nil, fmt.Errorf("ask the brokers about %d sent rows of %s: %w", len(ps), a.cfg.Table, err)
	}
	if len(found) != len(cands) {
		return Report{}, nil, fmt.Errorf("the broker lookup answered %d of %d positions", len(found), len(cands))
	}
	rep = Report{Checked: len(cands)}
	unknown = make([]bool, len(cands))
	var missing []int
	for i, f := range found {
		switch f.Verdict {
		case brokeraudit.Present:
			rep.Present++
		case brokeraudit.Missing:
			rep.Missing++
			missing = append(missing, i)
		default:
			rep.Unknown++
			unknown[i] = true
		}
	}
	if len(missing) > 0 {
		err = a.lost(ctx, cands, found, missing, repair, nowMs, &rep)
	}
	return rep, unknown, err
}

// lost records the missing rows idx of cands in rep and, with repair, makes them due again.
// The lookup's reason already names the broker ("lost by broker B after acknowledgement:
// ...", Finding.Reason).
func (a *Auditor) lost(ctx context.Context, cands []candidate, found []brokeraudit.Finding, idx []int, repair bool, nowMs int64, rep *Report) error {
	var n int64
	if repair {
		ids, reasons, settled := make([]int64, len(idx)), make([]string, len(idx)), make([]int64, len(idx))
		for j, i := range idx {
			ids[j], reasons[j], settled[j] = cands[i].id, found[i].Reason, cands[i].settled
		}
		var err error
		if n, err = a.st.repair(ctx, ids, reasons, settled, nowMs); err != nil {
			return err
		}
		rep.Repaired += int(n)
	}
	for _, i := range idx {
		c := cands[i]
		l := Lost{ID: c.id, MsgID: c.msgID, Topic: c.topic, Tag: c.tag, ShardingKey: c.key, Reason: found[i].Reason,
			Ordered: c.key != "" && a.cfg.Ordered != nil && a.cfg.Ordered(c.topic, c.tag), Repaired: repair && n > 0,
			Broker: c.broker, QueueID: c.queue, QueueOffset: c.offset, SentAtMs: c.settled}
		if l.Ordered && l.Repaired {
			rep.RepairedOrdered++
		}
		if len(rep.Lost) < maxListed {
			rep.Lost = append(rep.Lost, l)
		}
	}
	if repair && int(n) < len(idx) {
		// Sent again, or changed by an operator, since the audit read them: their newer
		// state stands. Counted as repaired only for the rows changed.
		rep.RepairedOrdered = min(rep.RepairedOrdered, rep.Repaired)
	}
	return nil
}

// Range is what Audit checks: rows sent in [From, To] (To zero: now), of Topic (empty:
// any), in journal entries not yet audited, or all of them with All.
type Range struct {
	From, To time.Time
	Topic    string
	// All checks the rows of entries already audited too.
	All bool
	// Repair makes the missing rows due again; without it Audit only reports them.
	Repair bool
}

// Audit checks every sent row of rg with a recorded position, at the configured rate, and
// returns what it found: `outbox-relay audit`.
func (a *Auditor) Audit(ctx context.Context, rg Range) (Report, error) {
	if err := a.prepare(ctx); err != nil {
		return Report{}, err
	}
	nowMs, err := a.st.now(ctx)
	if err != nil {
		return Report{}, err
	}
	w := window{from: rg.From.UnixMilli(), to: nowMs, topic: rg.Topic, all: rg.All}
	if !rg.To.IsZero() {
		w.to = min(rg.To.UnixMilli(), nowMs)
	}
	var total Report
	cur := storedlog.Cursor{SettledMs: w.from}
	for {
		rep, next, done, err := a.step(ctx, w, cur, rg.Repair, nowMs)
		total.add(rep)
		if err != nil || done {
			return total, err
		}
		cur = next
		if nowMs, err = a.st.now(ctx); err != nil { // the next batch's audit time
			return total, err
		}
	}
}
