// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"errors"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// term is one term of leadership (lead): the contexts its passes run under and the services
// that run beside them, from the term's start until it has ended (end).
type term struct {
	// stopLead ends the term: no new page, no new send. It is done when Run's ctx is, when
	// the partition is handed over, when the lock is lost and when the database stalls.
	stopLead    context.Context
	stopLeading context.CancelCauseFunc
	// abort abandons the sends in flight: at once when the database stalls (nothing could
	// be written back), else ShutdownTimeout after stopLead. A lost lock does not abandon
	// them: they were sent all the same, and their acknowledgements are written back, so
	// that a new leader does not publish them again.
	abort   context.Context
	abandon context.CancelCauseFunc

	// handover ends the term when the group hands the partition to another relay (nothing
	// for a relay of its own); abortWatch abandons the sends in flight after stopLead (abort);
	// keeper extends the lock (keepLock) until it is stopped, past the end of the term.
	handover, abortWatch, keeper startstop.Service
	// check is the engine's check of the database, which the keeper starts now and then.
	check startstop.Service
	// late is the engine's late units (sends a page did not wait for), which the passes
	// start; its Stop waits for them without cancelling them (abort does).
	late startstop.Service
}

// newTerm returns a term of ctx, its services not yet started.
func (r *Relay) newTerm(ctx context.Context) *term {
	t := &term{check: r.eng.DatabaseCheck(), late: r.eng.LateUnits()}
	t.stopLead, t.stopLeading = context.WithCancelCause(ctx)
	t.abort, t.abandon = context.WithCancelCause(context.WithoutCancel(ctx))
	t.handover = startstop.New(func(ctx context.Context) { r.gate.watchHandover(ctx, t.stopLeading) })
	t.abortWatch = startstop.New(func(ctx context.Context) { r.abortAfter(ctx, t.stopLead, t.abandon) })
	t.keeper = startstop.New(func(ctx context.Context) { r.keepLock(ctx, t.stopLeading, t.abandon) })
	return t
}

// services are the term's services in the order they start.
func (t *term) services() []startstop.Service {
	return []startstop.Service{t.handover, t.abortWatch, t.keeper}
}

// end stops the term's services (the keeper, and the check of the database it may have
// started, first: no extension after the lock's release) and cancels its contexts. It may be
// called again. The late units are not among them: endTerm has waited for them.
func (t *term) end() {
	startstop.StopAll(t.keeper, t.check, t.abortWatch, t.handover)
	t.abandon(nil)
	t.stopLeading(nil)
}

// abortAfter abandons the sends in flight (abandon) once stopLead is done: at once when the
// database stalled, else ShutdownTimeout later; unless ctx ends first.
func (r *Relay) abortAfter(ctx, stopLead context.Context, abandon context.CancelCauseFunc) {
	select {
	case <-ctx.Done():
		return
	case <-stopLead.Done():
	}
	if cause := context.Cause(stopLead); errors.Is(cause, errStalled) {
		abandon(cause)
		return
	}
	t := time.NewTimer(r.cfg.ShutdownTimeout)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
		abandon(errShutdown)
	}
}

// watchHandover ends the term (end) once the gate closes, the partition handed to another
// relay of the group, unless ctx ends first; a nil gate (a relay of its own) returns at once.
func (g *gate) watchHandover(ctx context.Context, end context.CancelCauseFunc) {
	if g == nil {
		return
	}
	for {
		if !g.wanted() {
			end(nil)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-g.changed:
		}
	}
}
