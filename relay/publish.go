// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"sync"
	"time"
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
	err    error         // the publisher's error of a failure
	delay  time.Duration // how long a deferred row waits
	capped bool          // a transient retry: counted, but never past max_retry_count
	unsent bool          // deferred without an attempt: no failure to count
}

// publish runs the units on at most Concurrency goroutines. Each unit writes only its own
// rows' results, so no lock is needed. Once fence reports the lock's validity gone, no
// further send starts.
func (r *Relay) publish(ctx context.Context, units []unit, items []item, results []result, fence func() bool) {
	work := make(chan unit)
	var wg sync.WaitGroup
	for w := 0; w < min(r.cfg.Concurrency, len(units)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range work {
				r.runUnit(ctx, u, items, results, fence)
			}
		}()
	}
	for _, u := range units {
		if ctx.Err() != nil || (fence != nil && !fence()) {
			break // the rest stay due
		}
		work <- u
	}
	close(work)
	wg.Wait()
}

func (r *Relay) runUnit(ctx context.Context, u unit, items []item, results []result, fence func() bool) {
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
			for _, i := range u.idx {
				results[i] = result{kind: sent}
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		if KindOf(err) != SendRefused {
			// The broker did not take the request (unreachable, timeout, dropped connection,
			// busy): every message fails alike.
			for _, i := range u.idx {
				results[i] = failResult(err)
			}
			return
		}
		// The broker refused the batch: find out which message it refuses.
		r.log.Debug().Err(err).Int("messages", len(u.idx)).Msg("batch send refused, sending one by one")
		for _, i := range u.idx {
			r.sendOne(ctx, items[i], &results[i], fence)
		}
	case u.chain:
		for _, i := range u.idx {
			r.sendOne(ctx, items[i], &results[i], fence)
			if results[i].kind != sent && results[i].kind != dead {
				return // a failed or abandoned message holds back the rest of its key
			}
		}
	default:
		r.sendOne(ctx, items[u.idx[0]], &results[u.idx[0]], fence)
	}
}

func (r *Relay) sendOne(ctx context.Context, it item, res *result, fence func() bool) {
	if ctx.Err() != nil || (fence != nil && !fence()) {
		return // abandoned: the row stays due
	}
	err := r.send(ctx, it.route, it.msg)
	switch {
	case err == nil:
		*res = result{kind: sent}
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
	if KindOf(err) == SendPermanent {
		return result{kind: dead, reason: "refused by the broker: " + err.Error()}
	}
	return result{kind: failed, reason: err.Error(), err: err}
}

func (r *Relay) send(ctx context.Context, route Route, msgs ...*Message) error {
	msgs, spans := r.traceSend(ctx, msgs) // tracing.go; free when tracing is off
	start := time.Now()
	err := r.pub.Send(ctx, route, msgs...)
	r.metrics.ObservePublish(time.Since(start))
	spans.end(err)
	if err == nil {
		r.incidents.success(msgs[0].Topic)
	} else if ctx.Err() == nil {
		r.metrics.SendFailed(KindOf(err), len(msgs))
	}
	return err
}
