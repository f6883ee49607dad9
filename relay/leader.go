package relay

import (
	"context"
	"errors"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/outbox-relay/outbox-relay/outbox"
)

var (
	errLockLost = errors.New("leader lock lost")
	errShutdown = errors.New("shutdown timeout: abandoning sends in flight")
)

// Run relays the table until ctx ends: it waits for the table's lock, then drains due rows
// whenever the poll interval passes or a writer nudges, extending the lock every third of its
// TTL. When an extension fails it stops publishing at once: sends in flight are abandoned,
// their rows stay due, and it goes back to waiting for the lock. When ctx ends it takes no
// new batch, waits up to ShutdownTimeout for the batch in flight, releases the lock and
// returns nil. Any other return is an error of configuration.
func (r *Relay) Run(ctx context.Context) error {
	if r.rdb == nil {
		return errors.New("relay: Run needs a Redis client for the lock")
	}
	rs := redsync.New(goredis.NewPool(r.rdb))
	mutex := rs.NewMutex(r.cfg.LockKey,
		redsync.WithExpiry(r.cfg.LockTTL),
		redsync.WithTries(1),
		redsync.WithSetNXOnExtend(), // an expired lock may be re-taken by its owner if free
	)
	nudges := r.listen(ctx)
	retry := time.NewTicker(r.cfg.LockTTL / 3)
	defer retry.Stop()
	for {
		err := mutex.TryLockContext(ctx)
		if err == nil {
			r.lead(ctx, mutex, nudges)
		} else if ctx.Err() == nil {
			var taken *redsync.ErrTaken
			if !errors.As(err, &taken) && !errors.Is(err, redsync.ErrFailed) {
				r.log.Warn().Err(err).Msg("lock: cannot reach Redis")
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-retry.C:
		}
	}
}

// lead publishes while the lock is held.
func (r *Relay) lead(ctx context.Context, mutex *redsync.Mutex, nudges <-chan struct{}) {
	r.log.Info().Str("lock", r.cfg.LockKey).Msg("leader: publishing")
	r.cfg.Metrics.setLeader(r.cfg.Table, true)
	defer r.cfg.Metrics.setLeader(r.cfg.Table, false)

	// abort ends sends in flight: at once when the lock is lost, or ShutdownTimeout after ctx.
	abort, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(r.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			cancel(errShutdown)
		}
	}()
	go r.keepLock(abort, mutex, cancel)
	go r.sampleBacklogEvery(abort, 5*time.Second)

	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	failures := 0
	for ctx.Err() == nil && abort.Err() == nil {
		st, err := r.DrainOnce(ctx, abort)
		if err != nil {
			failures++
			if errors.Is(err, ErrBrokerUnreachable) {
				r.log.Warn().Err(err).Msg("broker unreachable: backing off")
			} else {
				r.log.Error().Err(err).Msg("drain failed")
			}
		} else {
			failures = 0
		}
		if err == nil && st.Changed() > 0 {
			continue // more may have been committed meanwhile
		}
		wait := r.cfg.PollInterval
		if failures > 0 {
			wait = min(r.cfg.PollInterval*time.Duration(1<<min(failures, 5)), 30*time.Second)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-abort.Done():
		case <-nudges:
		case <-poll.C:
		case <-timer.C:
		}
		timer.Stop()
	}

	if errors.Is(context.Cause(abort), errLockLost) {
		r.log.Error().Str("lock", r.cfg.LockKey).Msg("leader lock lost: stopped publishing")
		return
	}
	cancel(nil)
	uctx, ucancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ucancel()
	if ok, err := mutex.UnlockContext(uctx); !ok || err != nil {
		r.log.Warn().Err(err).Msg("lock release failed; it expires after lock.ttl")
	} else {
		r.log.Info().Msg("lock released")
	}
}

// keepLock extends the lock every third of its TTL until abort is done; a failed extension
// cancels abort with errLockLost.
func (r *Relay) keepLock(abort context.Context, mutex *redsync.Mutex, cancel context.CancelCauseFunc) {
	t := time.NewTicker(r.cfg.LockTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-abort.Done():
			return
		case <-t.C:
		}
		ctx, c := context.WithTimeout(abort, r.cfg.LockTTL/3)
		ok, err := mutex.ExtendContext(ctx)
		c()
		if abort.Err() != nil {
			return
		}
		if !ok || err != nil {
			r.cfg.Metrics.lockLost(r.cfg.Table)
			r.log.Warn().Err(err).Msg("lock extension failed")
			cancel(errLockLost)
			return
		}
	}
}

// listen forwards writers' nudges for the table into a channel that holds at most one.
func (r *Relay) listen(ctx context.Context) <-chan struct{} {
	if r.cfg.DisableNudge {
		return nil
	}
	out := make(chan struct{}, 1)
	sub := r.rdb.Subscribe(ctx, outbox.NudgeChannel(r.cfg.Table))
	go func() {
		defer sub.Close()
		ch := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-ch:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}

// sampleBacklogEvery updates the backlog gauges until ctx is done, beside the drain loop so
// that a long drain neither delays the samples nor is delayed by them.
func (r *Relay) sampleBacklogEvery(ctx context.Context, every time.Duration) {
	if r.cfg.Metrics == nil {
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
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pending, oldest, err := r.store.backlog(ctx, time.Now())
	if err != nil {
		r.log.Warn().Err(err).Msg("backlog sample failed")
		return
	}
	r.cfg.Metrics.setBacklog(r.cfg.Table, pending, oldest.Seconds())
}
