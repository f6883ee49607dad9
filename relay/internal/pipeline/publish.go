// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// outcome kinds of one row in a page.
const (
	held     = iota // untouched: held behind its ordered key, abandoned, or not published
	sent            // acknowledged by the broker
	failed          // the send failed; incidents.judge turns it into retry or deferred
	retry           // a counted failure: retry_count goes up, dead past max_retry_count
	deferred        // a failure of a broker incident: waits, retry count untouched
	dead            // can never be sent as it is
)

type result struct {
	kind   int
	reason string
	err    error           // the publisher's error of a failure
	delay  time.Duration   // how long a deferred row waits
	capped bool            // a transient retry: counted, but never past max_retry_count
	unsent bool            // deferred without an attempt: no failure to count
	stored *message.Stored // where the broker stored a sent row, when the publisher said
}

// detachAfter is how long a page waits for its slowest units once all of them have started.
// Units still running then go on detached (late): their rows are held by the relay until
// they end and are written back on their own, so that a slow or hung send holds its own rows
// and key, not the page, the pass and every key behind them.
const detachAfter = 50 * time.Millisecond

// running is one unit being published; out holds its results, out[n] for the row u.idx[n].
type running struct {
	u    unit
	out  []result
	done chan struct{}
}

// publish runs the units, each on a goroutine holding one of the relay's Concurrency send
// slots, and copies their results into results. Once fence reports the lock's validity gone,
// no further send starts. With detach, the units still running detachAfter after the last
// one started are returned, running, instead of waited for; their rows' results stay held.
func (r *Engine) publish(ctx context.Context, units []unit, items []item, results []result, fence func() bool, detach bool) (late []*running) {
	started := make([]*running, 0, len(units))
dispatch:
	for _, u := range units {
		if ctx.Err() != nil || (fence != nil && !fence()) {
			break // the rest stay due
		}
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			break dispatch
		}
		ru := &running{u: u, out: make([]result, len(u.idx)), done: make(chan struct{})}
		started = append(started, ru)
		go func() {
			defer func() { <-r.slots }()
			defer close(ru.done)
			r.runUnit(ctx, ru.u, items, ru.out, fence)
		}()
	}
	var timeout <-chan time.Time
	if detach {
		t := time.NewTimer(detachAfter)
		defer t.Stop()
		timeout = t.C
	}
	expired := false
	for _, ru := range started {
		if !expired {
			select {
			case <-ru.done:
			case <-timeout:
				expired = true
			}
		}
		select {
		case <-ru.done:
			for n, i := range ru.u.idx {
				results[i] = ru.out[n]
			}
		default:
			late = append(late, ru)
		}
	}
	return late
}

// runUnit publishes u, writing the result of its n-th row to out[n].
func (r *Engine) runUnit(ctx context.Context, u unit, items []item, out []result, fence func() bool) {
	switch {
	case u.batch:
		if fence != nil && !fence() {
			return
		}
		msgs := make([]*Message, len(u.idx))
		for n, i := range u.idx {
			msgs[n] = items[i].msg
		}
		err := r.send(ctx, items[u.idx[0]].route, msgs...)
		if err == nil {
			for n := range u.idx {
				out[n] = result{kind: sent, stored: msgs[n].Stored}
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if message.KindOf(err) != message.SendRefused {
			// The broker did not take the request (unreachable, timeout, dropped connection,
			// busy): every message fails alike.
			for n := range u.idx {
				out[n] = failResult(err)
			}
			return
		}
		// The broker refused the batch: find out which message it refuses.
		r.log.Debug().Err(err).Int("messages", len(u.idx)).Msg("batch send refused, sending one by one")
		for n, i := range u.idx {
			r.sendOne(ctx, items[i], &out[n], fence)
		}
	case u.lane:
		r.runLane(ctx, u, items, out, fence)
	default:
		r.sendOne(ctx, items[u.idx[0]], &out[0], fence)
	}
}

// runLane publishes the chains of ordered keys (u.idx holds each key's rows in id order, one
// key after the other; several keys only when they share a queue) in batch requests of one
// row per key: the next row of every key still going, so each key has one send in flight
// and its rows go one after the other. A key whose row is not sent holds its later rows; the
// other keys go on. One row per key and batch keeps what a lost acknowledgement costs as
// with single sends: the copy that follows is of the key's last message, never of an
// earlier one after a later. A batch the broker refuses is
// sent again one message at a time, to find which fails, and so is the rest of the lane (a
// broker that refuses batches of keyed messages refuses them all).
func (r *Engine) runLane(ctx context.Context, u unit, items []item, out []result, fence func() bool) {
	key := func(n int) string { return items[u.idx[n]].msg.ShardingKey }
	var keys []string
	left := map[string][]int{} // each key's rows not yet settled, as positions in u.idx
	for n := range u.idx {
		k := key(n)
		if _, ok := left[k]; !ok {
			keys = append(keys, k)
		}
		left[k] = append(left[k], n)
	}
	// settle records the result of position n: a sent or dead row lets its key's next go,
	// any other holds the key's later rows (their results stay held).
	settle := func(n int) {
		if k := key(n); out[n].kind == sent || out[n].kind == dead {
			left[k] = left[k][1:]
		} else {
			left[k] = nil
		}
	}
	refused := false // a batch was refused: the rest go one request each
	for {
		if ctx.Err() != nil || (fence != nil && !fence()) {
			return
		}
		var batch []int // positions in u.idx: the next row of each key, within the bounds
		size := 0
		for _, k := range keys {
			if len(left[k]) == 0 {
				continue
			}
			n := left[k][0]
			b := len(items[u.idx[n]].msg.Body)
			if len(batch) > 0 && (refused || len(batch) >= r.cfg.MaxBatchMessages || size+b > r.cfg.MaxBatchBytes) {
				break
			}
			batch = append(batch, n)
			size += b
		}
		switch len(batch) {
		case 0:
			return
		case 1:
			r.sendOne(ctx, items[u.idx[batch[0]]], &out[batch[0]], fence)
			settle(batch[0])
			continue
		}
		msgs := make([]*Message, len(batch))
		for j, n := range batch {
			msgs[j] = items[u.idx[n]].msg
		}
		err := r.send(ctx, items[u.idx[batch[0]]].route, msgs...)
		switch k := message.KindOf(err); {
		case err == nil:
			for j, n := range batch {
				out[n] = result{kind: sent, stored: msgs[j].Stored}
			}
		case ctx.Err() != nil:
			return
		case k == message.SendRefused || k == message.SendMisconfigured || k == message.SendPermanent:
			// The broker refused the batch, or its keys no longer share a queue: one
			// message at a time, so that only a refused message's key is held.
			r.log.Debug().Err(err).Int("messages", len(batch)).Msg("batch of ordered keys refused, sending one by one")
			refused = true
			for _, n := range batch {
				r.sendOne(ctx, items[u.idx[n]], &out[n], fence)
			}
		default:
			// The broker did not take the request: every message fails alike.
			for _, n := range batch {
				out[n] = failResult(err)
			}
		}
		for _, n := range batch {
			settle(n)
		}
	}
}

func (r *Engine) sendOne(ctx context.Context, it item, res *result, fence func() bool) {
	if ctx.Err() != nil || (fence != nil && !fence()) {
		return // abandoned: the row stays due
	}
	err := r.send(ctx, it.route, it.msg)
	switch {
	case err == nil:
		*res = result{kind: sent, stored: it.msg.Stored}
	case ctx.Err() != nil:
		// Abandoned mid-send: whether the broker stored it is unknown, and the row stays due.
	default:
		*res = failResult(err)
	}
	if err != nil {
		r.log.Debug().Str("msg_id", it.msg.MsgID).Int64("id", it.msg.ID).Str("topic", it.msg.Topic).
			Str("tag", it.msg.Tag).Err(err).Msg("send failed")
	}
}

// failResult is a failed send's result: dead at once when the message can never be sent
// (so that an ordered key's next message may go in the same chain), else failed, for
// incidents.judge to turn into a retry or a deferral.
func failResult(err error) result {
	if message.KindOf(err) == message.SendPermanent {
		return result{kind: dead, reason: "refused by the broker: " + err.Error()}
	}
	return result{kind: failed, reason: err.Error(), err: err}
}

func (r *Engine) send(ctx context.Context, route Route, msgs ...*Message) error {
	traced, spans := r.traceSend(ctx, msgs) // tracing.go; free when tracing is off
	start := time.Now()
	err := r.pub.Send(ctx, route, traced...)
	keepStored(msgs, traced)
	r.metrics.ObservePublish(time.Since(start))
	spans.end(err)
	if err == nil {
		r.incidents.success(msgs[0].Topic)
	} else if ctx.Err() == nil {
		r.metrics.SendFailed(message.KindOf(err), len(msgs))
	}
	return err
}
