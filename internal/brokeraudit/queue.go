// SPDX-License-Identifier: Apache-2.0

package brokeraudit

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
)

// brokerConn is one Check's connection to a broker, or why there is none: a broker that
// cannot be reached is dialled once per Check, not once per queue.
type brokerConn struct {
	c   *remoting.Conn
	err error
}

func (r *RocketMQ) dial(ctx context.Context, addr string) *brokerConn {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	c, err := remoting.Dial(dctx, addr, nil, r.opts()...)
	return &brokerConn{c: c, err: err}
}

func (bc *brokerConn) close() {
	if bc.c != nil {
		_ = bc.c.Close()
	}
}

// queueCheck decides the positions of one queue of one broker.
type queueCheck struct {
	r   *RocketMQ
	bc  *brokerConn
	key queueKey
	ps  []Position
	out []Finding
	// earliest is the queue's oldest kept message's store time, asked once when needed.
	earliest *time.Time
}

// run reads the queue from the lowest pending offset up: each pull answers the queue's
// bounds and the messages of up to PullBatch offsets; offsets below the first are decided
// by the retention rule, offsets at or above the end are Missing.
func (q *queueCheck) run(ctx context.Context, idx []int) {
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(q.ps[a].Offset, q.ps[b].Offset) })
	if q.bc.err != nil {
		q.all(idx, Unknown, fmt.Sprintf("broker %s at %s unreachable: %v", q.key.broker, q.key.addr, q.bc.err))
		return
	}
	var lo, hi int64
	known := false
	for len(idx) > 0 {
		i := idx[0]
		off := q.ps[i].Offset
		switch {
		case known && off >= hi:
			for _, j := range idx {
				q.missing(ctx, j, fmt.Sprintf("queue %d of %s ends at offset %d, at or below %d: the tail is gone", q.key.queue, q.key.topic, hi, q.ps[j].Offset))
			}
			return
		case known && off < lo:
			q.belowFirst(ctx, i, lo)
			idx = idx[1:]
			continue
		}
		p, err := q.pull(ctx, idx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, remoting.ErrClosed) {
				q.bc.err = err // the broker's other queues are not asked again in this Check
			}
			q.all(idx, Unknown, fmt.Sprintf("broker %s at %s: %v", q.key.broker, q.key.addr, err))
			return
		}
		lo, hi, known = p.MinOffset, p.MaxOffset, true
		idx = q.decide(ctx, idx, p.Messages)
		if len(idx) > 0 && idx[0] == i && off >= lo && off < hi {
			// In the queue's bounds, yet the broker sent nothing for it: say so, and go on.
			q.out[i] = Finding{Unknown, fmt.Sprintf("broker %s sent no message for offset %d of queue %d of %s (queue holds %d to %d)", q.key.broker, off, q.key.queue, q.key.topic, lo, hi)}
			idx = idx[1:]
		}
	}
}

// pull reads from the first pending offset as many messages as reach the last pending offset
// within PullBatch.
func (q *queueCheck) pull(ctx context.Context, idx []int) (*remoting.Pulled, error) {
	first := q.ps[idx[0]].Offset
	n := int64(1)
	for _, j := range idx {
		if d := q.ps[j].Offset - first + 1; d <= int64(q.r.cfg.PullBatch) {
			n = d
		}
	}
	pctx, cancel := context.WithTimeout(ctx, q.r.cfg.Timeout)
	defer cancel()
	return q.bc.c.Pull(pctx, q.r.cfg.Group, q.key.topic, q.key.queue, first, int(n))
}

// decide settles the pending positions whose offsets the pulled messages cover and returns
// the others, in order.
func (q *queueCheck) decide(ctx context.Context, idx []int, msgs []*remoting.Message) []int {
	at := make(map[int64]*remoting.Message, len(msgs))
	for _, m := range msgs {
		at[m.QueueOffset] = m
	}
	rest := idx[:0:0]
	for _, i := range idx {
		p := q.ps[i]
		m := at[p.Offset]
		switch {
		case m == nil:
			rest = append(rest, i)
		case m.Properties[PropMsgID] == p.MsgID:
			q.out[i] = Finding{Verdict: Present}
		default:
			other, ok := m.Properties[PropMsgID]
			if !ok {
				other = "none"
			}
			q.missing(ctx, i, fmt.Sprintf("queue %d of %s holds another message at offset %d (%s=%s)", q.key.queue, q.key.topic, p.Offset, PropMsgID, other))
		}
	}
	return rest
}

// belowFirst decides a position below the queue's first offset: within the retention it was
// lost, past it the broker may have deleted it on schedule.
func (q *queueCheck) belowFirst(ctx context.Context, i int, first int64) {
	p := q.ps[i]
	age := q.r.cfg.Now().Sub(p.SentAt)
	if age >= q.r.cfg.Retention {
		q.out[i] = Finding{Unknown, fmt.Sprintf("aged out: queue %d of %s starts at offset %d above %d, and the message was sent %s ago, past the broker's retention (%s)",
			q.key.queue, q.key.topic, first, p.Offset, age.Round(time.Second), q.r.cfg.Retention)}
		return
	}
	oldest := "unknown"
	if t := q.oldest(ctx); t != nil {
		oldest = t.UTC().Format(time.RFC3339)
	}
	q.missing(ctx, i, fmt.Sprintf("queue %d of %s starts at offset %d above %d, though the message was sent %s ago, within the broker's retention (%s; oldest kept message stored %s)",
		q.key.queue, q.key.topic, first, p.Offset, age.Round(time.Second), q.r.cfg.Retention, oldest))
}

// oldest returns the store time of the queue's oldest kept message, asked once; nil when the
// broker does not say.
func (q *queueCheck) oldest(ctx context.Context) *time.Time {
	if q.earliest == nil {
		var t time.Time
		ectx, cancel := context.WithTimeout(ctx, q.r.cfg.Timeout)
		ms, err := q.bc.c.EarliestStoreTime(ectx, q.key.topic, q.key.queue)
		cancel()
		if err == nil && ms > 0 {
			t = time.UnixMilli(ms)
		}
		q.earliest = &t
	}
	if q.earliest.IsZero() {
		return nil
	}
	return q.earliest
}

// missing records a Missing finding for position i, unless its offset message id finds the
// message stored elsewhere on the broker (a queue offset recorded wrong): then Present.
func (q *queueCheck) missing(ctx context.Context, i int, why string) {
	p := q.ps[i]
	if m, err := q.view(ctx, p.OffsetMsgID); err == nil && m.Topic == p.Topic && m.Properties[PropMsgID] == p.MsgID {
		q.out[i] = Finding{Present, fmt.Sprintf("found by its offset message id at queue %d offset %d, not at the recorded queue %d offset %d", m.QueueID, m.QueueOffset, p.QueueID, p.Offset)}
		return
	}
	q.out[i] = Finding{Missing, fmt.Sprintf("lost by broker %s after acknowledgement: %s", q.key.broker, why)}
}

// view asks the broker for the message at the commit log offset of an offset message id.
func (q *queueCheck) view(ctx context.Context, offsetMsgID string) (*remoting.Message, error) {
	off, err := commitLogOffset(offsetMsgID)
	if err != nil {
		return nil, err
	}
	vctx, cancel := context.WithTimeout(ctx, q.r.cfg.Timeout)
	defer cancel()
	return q.bc.c.ViewMessage(vctx, off)
}

// commitLogOffset reads the commit log offset of an offset message id: the hex of the store
// host (4 or 16 bytes of address, 4 of port) followed by 8 bytes of offset.
func commitLogOffset(id string) (int64, error) {
	b, err := hex.DecodeString(id)
	if err != nil || (len(b) != 16 && len(b) != 28) {
		return 0, errors.New("brokeraudit: no offset message id")
	}
	var off int64
	for _, c := range b[len(b)-8:] {
		off = off<<8 | int64(c)
	}
	return off, nil
}

// all gives every position of idx the same finding.
func (q *queueCheck) all(idx []int, v Verdict, why string) {
	for _, i := range idx {
		q.out[i] = Finding{v, why}
	}
}
