// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/internal/lease"
)

var (
	errLockLost = errors.New("leader lock lost")
	errStalled  = errors.New("no answer from the database")
	errShutdown = errors.New("shutdown timeout: abandoning sends in flight")
)

// Run relays the table until ctx ends: it waits for the table's lock, then drains due rows
// whenever a writer nudges or the adaptive poll comes round, extending the lock every
// quarter of its TTL. It stops publishing at once when the lock is lost or its validity runs
// out before an extension succeeds (a frozen process), and gives the lock up when the
// database has not answered for StallTimeout; then it goes back to waiting for the lock.
// When ctx ends it takes no new page, waits up to ShutdownTimeout for the sends in flight,
// writes their results back, releases the lock and returns nil; the lock is extended until
// then, so that no standby takes the table while sends are in flight. Every goroutine it
// started has ended when it returns. Any other return is an error of configuration.
func (r *Relay) Run(ctx context.Context) error {
	if r.rdb == nil {
		return errors.New("relay: Run needs a Redis client for the lock")
	}
	// The stored-position journal's appender runs until the last term's write-backs are
	// done, not until ctx ends: stopped last, it appends what they left.
	appender := r.eng.JournalAppender()
	_ = appender.Start(context.WithoutCancel(ctx)) // a Func never fails to start
	defer appender.Stop()
	// The services that run beside the relay's terms for the whole of Run: the nudge
	// listener, then the backlog sampler, stopped in that order once ctx ends.
	nudges, services := r.services()
	if err := startstop.StartAll(ctx, services...); err != nil {
		return err
	}
	defer startstop.StopAll(services...)
	r.campaign(ctx, nudges)
	return nil
}

// services returns the channel of writers' nudges and the services that run for the whole
// of Run: the listener feeding it (none for a group's partition, whose group listens, nor
// with nudges disabled) and the backlog sampler (none for a group's partition either: the
// group samples its table once).
func (r *Relay) services() (<-chan struct{}, []startstop.Service) {
	var services []startstop.Service
	var nudges <-chan struct{}
	switch {
	case r.nudgeIn != nil:
		nudges = r.nudgeIn // fed by the group: writers' nudges unless disabled, and sibling wakes
	case !r.cfg.DisableNudge:
		out := make(chan struct{}, 1)
		nudges = out
		services = append(services, nudgeListener(r.rdb, r.cfg.Database, r.cfg.Table, []chan struct{}{out}))
	}
	if r.gate == nil {
		services = append(services, startstop.New(func(ctx context.Context) { r.sampleBacklogEvery(ctx, 5*time.Second) }))
	}
	return nudges, services
}

// campaign waits for the table's lock (a group's partition: for its turn, then the lock)
// and leads while it holds it (lead), again and again until ctx ends.
func (r *Relay) campaign(ctx context.Context, nudges <-chan struct{}) {
	tick := time.NewTicker(r.cfg.LockTTL / 4)
	defer tick.Stop()
	r.startWaiting()
	var nextWaitLog time.Duration = 3 * r.cfg.LockTTL
	waitingForLayout := false
	for {
		if r.gate != nil && !r.gate.wanted() {
			// Another relay of the group is to hold this partition: wait until it is ours.
			ours, done := r.awaitTurn(ctx, tick.C)
			if done {
				return
			}
			if ours {
				r.startWaiting()
				nextWaitLog = 3 * r.cfg.LockTTL
			}
			continue
		}
		other, err := r.lease.Take(ctx)
		fenceErr := errors.Is(err, lease.ErrFence) // the lock was not tried
		if err == nil && other != 0 {
			if !waitingForLayout {
				r.log.Warn().Int("partitions", r.cfg.Partitions).Int("other_partitions", other).
					Msg("relays of this table with another relay.partitions still hold their locks: waiting until the last of them stops")
			}
			waitingForLayout = true
		} else if !fenceErr {
			if waitingForLayout {
				r.log.Info().Int("partitions", r.cfg.Partitions).Msg("the table's layout of partitions is ours now")
			}
			waitingForLayout = false
		}
		var freed <-chan time.Time // when the holder's lock expires, if before the next tick
		if waitingForLayout {
			r.exportLockWait(r.Health().LockWait)
		} else if err == nil {
			r.waitingSince.Store(0)
			r.exportLockWait(0)
			cause := r.lead(ctx, nudges)
			r.startWaiting()
			nextWaitLog = 3 * r.cfg.LockTTL
			if errors.Is(cause, errStalled) {
				// Let a standby whose path to the database works take over first.
				select {
				case <-ctx.Done():
				case <-time.After(2 * r.cfg.LockTTL):
				}
			}
		} else if ctx.Err() == nil {
			freed = r.standBy(ctx, err, &nextWaitLog)
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-freed:
		case <-r.gate.changedChan():
		}
	}
}

// standBy notes a lock not taken (err): it logs Redis out of reach, and the wait once it
// reaches *nextWaitLog (then doubled), exports the wait, and returns when the holder's lock
// expires if before the next tick (lockExpiry).
func (r *Relay) standBy(ctx context.Context, err error, nextWaitLog *time.Duration) <-chan time.Time {
	if !lease.Busy(err) {
		r.log.Warn().Err(err).Msg("lock: cannot reach Redis")
	}
	if w := r.Health().LockWait; w >= *nextWaitLog {
		// Info: waiting is a standby's normal state. OutboxRelayLockWaitLong pages when
		// every relay of the table waits (outbox_relay_lock_wait_seconds).
		r.log.Info().Str("lock", r.cfg.LockKey).Float64("waited_s", w.Seconds()).
			Msg("standby: still waiting for the table's lock, held by another relay; if no other relay serves this table, another process is using the same lock key (lock.key)")
		*nextWaitLog *= 2
	}
	r.exportLockWait(r.Health().LockWait)
	return r.lockExpiry(ctx)
}

// awaitTurn waits, for a group's partition that another relay is to hold, until the
// group's assignment changes, the next tick or the end of ctx (done), and reports whether
// the partition is this relay's now.
func (r *Relay) awaitTurn(ctx context.Context, tick <-chan time.Time) (ours, done bool) {
	r.waitingSince.Store(0)
	select {
	case <-ctx.Done():
		return false, true
	case <-r.gate.changed:
	case <-tick: // in case a signal went to an ending handover
	}
	return r.gate.wanted(), false
}

// lockExpiry returns a channel ready when the lock held by another relay expires, if that is
// sooner than the next tick: a standby then takes over a dead leader's lock within
// milliseconds of its expiry instead of up to a quarter of the TTL later. It costs one PTTL
// per failed attempt; nil (wait for the tick) under Redlock, whose masters may disagree.
func (r *Relay) lockExpiry(ctx context.Context) <-chan time.Time {
	if len(r.cfg.LockClients) > 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.LockTTL/4)
	defer cancel()
	ttl, err := r.rdb.PTTL(pctx, r.cfg.LockKey).Result()
	if err != nil || ttl <= 0 || ttl >= r.cfg.LockTTL/4 {
		return nil
	}
	return time.After(ttl + time.Millisecond)
}

func (r *Relay) startWaiting() {
	r.waitingSince.Store(max(1, int64(time.Since(r.eng.Progress().Start()))))
}

// lead publishes while the lock is held and returns why it stopped.
func (r *Relay) lead(ctx context.Context, nudges <-chan struct{}) error {
	r.log.Info().Str("lock", r.cfg.LockKey).Msg("leader: publishing")
	r.leading.Store(true)
	r.setOwned(true)
	defer func() {
		r.leading.Store(false)
		r.setOwned(false)
	}()
	r.eng.Progress().Restart() // the stall clock starts now
	// Another leader may have parked rows meanwhile: find them again.
	r.eng.NewTerm()

	// The term's services (term.go) run from here until the term has ended: the lease
	// outlives the term, extended until the last send in flight is written back and the
	// lock released (or lost), on a shutdown and on a handover alike, so that no next
	// owner reads rows whose sends are still in flight here.
	t := r.newTerm(ctx)
	_ = startstop.StartAll(context.WithoutCancel(ctx), t.services()...) // a Func never fails to start
	defer t.end()
	// The database's clock, and whether it accepts writes: read once the lock is being kept,
	// so that a slow answer never lets the lock lapse before its first extension.
	r.eng.CheckDatabase(t.stopLead)

	r.publishWhileLeading(t.stopLead, t.abort, nudges)
	return r.endTerm(t)
}

// publishWhileLeading drains the table pass after pass until stopLead is done, waiting
// between passes for a nudge, a late unit's end or the poll.
func (r *Relay) publishWhileLeading(stopLead, abort context.Context, nudges <-chan struct{}) {
	empty, failures := 0, 0
	// lastPolled is when a pass the poll started (not a nudge) last changed a row: rows
	// are coming from writers that do not nudge.
	var lastPolled time.Time
	polled := false // the current pass was started by the poll
	for stopLead.Err() == nil {
		var st Stats
		var err error
		if empty > 0 && failures == 0 {
			// Idle: one cheap probe instead of a pass's two page reads.
			r.eng.ReviewParked(stopLead) // a head deleted or moved makes its parked rows due
			var due bool
			due, err = r.eng.Store().AnyDue(stopLead)
			if err == nil && due {
				st, err = r.eng.Drain(stopLead, abort, r.lease.Valid, true)
			}
		} else {
			st, err = r.eng.Drain(stopLead, abort, r.lease.Valid, true)
		}
		var wait time.Duration
		switch {
		case err != nil && stopLead.Err() == nil:
			failures++
			r.log.Error().Err(err).Int("consecutive", failures).Msg("pass failed")
			wait = min(r.cfg.PollInterval<<min(failures-1, 5), 30*time.Second)
		case st.Changed() > 0:
			failures, empty = 0, 0
			if polled {
				lastPolled = time.Now()
			}
			if r.sawWork != nil {
				r.sawWork() // the other partitions' rows are likely coming too
			}
			continue // more may have been committed meanwhile
		default:
			failures = 0
			// Nothing changed: look again soon, then less and less often up to PollInterval.
			// The stall clock counts database answers: an idle leader probes at least twice
			// per StallTimeout, or a PollInterval longer than it would read as a stall.
			// While the poll keeps finding rows (within the last PollInterval), keep looking
			// every MinPollInterval: a writer that cannot nudge then waits at most that long,
			// and the idle table is back to one probe per PollInterval once they stop. Rows
			// announced by nudges do not count: their writers need no polling.
			wait = min(r.cfg.MinPollInterval<<min(empty, 20), r.cfg.PollInterval, r.cfg.StallTimeout/2)
			if time.Since(lastPolled) < r.cfg.PollInterval {
				wait = r.cfg.MinPollInterval
			}
			empty++
		}
		timer := time.NewTimer(wait)
		select {
		case <-stopLead.Done():
		case <-nudges:
			polled = false
			empty = 0
			if r.cfg.Partitions > 1 {
				// A nudge that names no partition (a plain one, or a PUBLISH by a writer in
				// another language) wakes every partition: one cheap probe first, since the
				// new row is most likely another partition's.
				empty = 1
			}
		case <-r.eng.LateDone():
			polled = false
			empty = 0 // a late unit ended: the rows behind it may go
		case <-timer.C:
			polled = true
		}
		timer.Stop()
	}
}

// endTerm ends a term whose stopLead is done: it waits for the late units, says why, and,
// unless the lock was lost, abandons what is still in flight, stops the lock's extensions
// and releases it. It returns the term's cause (nil for a shutdown or a handover).
func (r *Relay) endTerm(t *term) error {
	// The late units (sends a page did not wait for) end, or are abandoned with the sends in
	// flight (abort): their acknowledgements are written back before the lock is released.
	startstop.StopAll(t.late)
	cause := context.Cause(t.stopLead)
	if errors.Is(cause, context.Canceled) {
		cause = nil // Run's context: a shutdown, or a partition handed over
	}
	if cause == nil && r.gate != nil && !r.gate.wanted() {
		r.log.Info().Msg("partition handed over to another relay of the group")
	}
	switch {
	case errors.Is(cause, errLockLost):
		r.log.Error().Str("lock", r.cfg.LockKey).Msg("leader lock lost: stopped publishing")
		return cause
	case errors.Is(cause, errStalled):
		r.log.Error().Str("lock", r.cfg.LockKey).Float64("no_answer_s", r.eng.Progress().Since().Seconds()).
			Float64("writes_refused_s", r.eng.Progress().RefusingFor().Seconds()).
			Msg("no answer from the database: gave the lock up for a standby")
	}
	t.abandon(nil)
	// No extension may follow the release (made with SET NX, it would retake the lock), nor
	// a check of the database that one started.
	startstop.StopAll(t.keeper, t.check)
	uctx, ucancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ucancel()
	if err := r.lease.Release(uctx); err != nil {
		r.log.Warn().Err(err).Msg("lock release failed; it expires after lock.ttl")
	} else {
		r.log.Info().Msg("lock released")
	}
	return cause
}

// keepLock extends the lock every quarter of its TTL until keep is done: past the end of
// the term on a shutdown or a handover, until the sends in flight are written back. An
// extension that fails for want of an answer is tried again until the lock's validity runs
// out; one that finds the lock taken, or validity run out, ends the term with errLockLost.
// A leader whose database has left a statement unanswered for StallTimeout ends it with
// errStalled and abandons the sends in flight (abandon): nothing could be written back.
func (r *Relay) keepLock(keep context.Context, end, abandon context.CancelCauseFunc) {
	t := time.NewTicker(r.cfg.LockTTL / 4)
	defer t.Stop()
	lost := func(msg string, err error) {
		r.metrics.LockLost()
		r.log.Warn().Err(err).Msg(msg)
		end(errLockLost)
	}
	for {
		select {
		case <-keep.Done():
			return
		case <-t.C:
		}
		if !r.lease.Valid() {
			// Frozen past the lock's validity (SIGSTOP, a VM pause): another relay may lead.
			lost("lock validity ran out before an extension succeeded (was the process frozen?)", nil)
			return
		}
		r.eng.CheckDatabaseAsync(keep)
		if r.eng.Progress().StalledFor() > r.cfg.StallTimeout {
			end(errStalled)
			abandon(errStalled)
			return
		}
		other, err := r.lease.Extend(keep)
		if keep.Err() != nil {
			return
		}
		switch {
		case err == nil:
			if other != 0 {
				// The layout key expired under us (it is set with the lock's TTL) and relays
				// with another relay.partitions claimed the table: stop.
				r.metrics.LockLost()
				r.log.Warn().Int("other_partitions", other).Msg("relays with another relay.partitions claimed the table: stopped publishing")
				end(errLockLost)
				return
			}
		case !r.lease.Valid():
			lost("lock validity ran out before an extension succeeded", err)
			return
		case lease.Lost(err):
			lost("lock extension refused: another relay holds the lock", err)
			return
		default:
			r.log.Debug().Err(err).Msg("lock extension failed; trying again while the lock is valid")
		}
	}
}

// setOwned records in the metrics whether this process leads the table or partition.
func (r *Relay) setOwned(on bool) {
	if r.cfg.Partitions > 1 {
		r.metrics.SetPartitionOwned(r.cfg.Partition, on)
	} else {
		r.metrics.SetLeader(on)
	}
}

// nudgeListener is the service that subscribes to the nudges of database's table (Start
// returns once the subscription is made) and forwards them to outs (forwardNudges).
func nudgeListener(rdb redis.UniversalClient, database, table string, outs []chan struct{}) startstop.Service {
	return startstop.NewReady(func(ctx context.Context, ready func()) {
		sub := rdb.Subscribe(ctx, nudgeChannels(database, table)...)
		ready()
		forwardNudges(ctx, sub, outs)
	})
}

// forwardNudges signals the channels of outs (each holds at most one signal), one per
// partition in order, for each message of sub, until ctx ends; then it closes sub. A message
// naming its rows' partition hashes (outbox.NudgePayload) signals only their partitions
// (hash % len(outs)); any other signals all.
func forwardNudges(ctx context.Context, sub *redis.PubSub, outs []chan struct{}) {
	defer sub.Close()
	ch := sub.Channel()
	signal := func(out chan struct{}) {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case msg, ok := <-ch:
			if !ok {
				return
			}
			if hashes, named := outbox.ParseNudge(msg.Payload); named && len(outs) > 1 {
				for _, h := range hashes {
					signal(outs[h%uint32(len(outs))])
				}
				continue
			}
			for _, out := range outs {
				signal(out)
			}
		}
	}
}

// sampleBacklogEvery updates the backlog and dead-row gauges until ctx is done, beside the
// drain loop so that a long drain neither delays the samples nor is delayed by them. Leader
// and standbys alike sample, so every relay of a table exports its true backlog.
func (r *Relay) sampleBacklogEvery(ctx context.Context, every time.Duration) {
	if r.metrics == nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		r.sampleBacklog(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (r *Relay) sampleBacklog(ctx context.Context) {
	nowMs, err := r.eng.DBNow(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("backlog sample failed")
		return
	}
	pending, oldest, err := r.eng.Store().Backlog(ctx, time.UnixMilli(nowMs))
	if err != nil {
		r.log.Warn().Err(err).Msg("backlog sample failed")
		return
	}
	r.metrics.SetBacklog(pending, oldest.Seconds())
	deadRows, err := r.eng.Store().CountDead(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("dead rows sample failed")
		return
	}
	r.metrics.SetDeadRows(deadRows)
	unknown, err := r.eng.Store().CountUnknown(ctx)
	if err != nil {
		r.log.Warn().Err(err).Msg("unknown status rows sample failed")
		return
	}
	r.metrics.SetUnknownRows(unknown)
}

// exportLockWait sets the lock-wait gauge of a relay of its own; a group's partitions leave
// it to the group, which samples the table's wait once (Group.sampleBacklogEvery).
func (r *Relay) exportLockWait(d time.Duration) {
	if r.gate == nil {
		r.metrics.SetLockWait(d)
	}
}
