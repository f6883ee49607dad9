// SPDX-License-Identifier: Apache-2.0

// Package startstop gives every piece of background work one shape: a Service is started
// with Start, which returns once it runs, and stopped with Stop, which cancels it and returns
// only once its goroutine has ended; Stopped tells, or waits for, its end. Both are
// idempotent and safe to call from several goroutines, so that an owner can start its
// services in one place and stop them in one place, in an order it chooses, and know that
// nothing of theirs runs after. Tasks is the one kind whose Stop cancels nothing: a set of
// short tasks (such as sends whose results must be written back) that Stop waits for.
package startstop

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrStopped is the cause of a service's context once Stop cancelled it, to tell a Stop
// from the end of the context it was started with.
var ErrStopped = errors.New("service stopped")

// Service is background work with a goroutine of its own.
type Service interface {
	// Start starts the service unless it runs already, and returns once it runs: its
	// context is ctx's, cancelled by Stop as well.
	Start(ctx context.Context) error
	// Stop cancels the service's context and returns once its goroutine has ended; it does
	// nothing to a service not running (never started, stopped, or whose run returned).
	Stop()
	// Stopped returns a channel closed once the service's current run has ended; closed
	// already when it does not run.
	Stopped() <-chan struct{}
}

// Func is a Service that runs one function. Its run may return on its own (its work done)
// or when its context ends; either way the service is then stopped, and Start runs the
// function again. The zero Func is not usable: make one with New or NewReady.
type Func struct {
	run func(ctx context.Context, ready func())
	// readyAtStart: the run is ready once its goroutine is started (New), and Start does
	// not wait for it to be scheduled.
	readyAtStart bool

	op sync.Mutex // serialises Start and Stop: a Stop in progress ends before a Start begins

	mu      sync.Mutex // guards the fields below, read by Stopped while a Stop waits
	cancel  context.CancelCauseFunc
	stopped chan struct{} // the current or last run's, closed when it returned; nil: none yet
}

// New returns the service that runs run(ctx) in a goroutine of its own: Start returns as
// soon as the goroutine is started.
func New(run func(ctx context.Context)) *Func {
	return &Func{run: func(ctx context.Context, _ func()) { run(ctx) }, readyAtStart: true}
}

// NewReady returns the service that runs run(ctx, ready) in a goroutine of its own: Start
// returns once run has called ready (work it must do before its owner goes on, such as a
// subscription) or returned. run must not call the service's Start or Stop.
func NewReady(run func(ctx context.Context, ready func())) *Func {
	return &Func{run: run}
}

// Start starts the service's run unless one is under way, and returns once it is ready. It
// never fails; the error is the Service interface's.
func (s *Func) Start(ctx context.Context) error {
	s.op.Lock()
	defer s.op.Unlock()
	if s.running() {
		return nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stopped, ready := make(chan struct{}), make(chan struct{})
	s.mu.Lock()
	s.cancel, s.stopped = cancel, stopped
	s.mu.Unlock()
	signal := sync.OnceFunc(func() { close(ready) })
	if s.readyAtStart {
		signal()
	}
	go func() {
		defer close(stopped)
		defer signal() // a run that returns before it is ready does not hold Start
		defer cancel(nil)
		s.run(ctx, signal)
	}()
	<-ready
	return nil
}

// Stop cancels the service's run, if one is under way, with ErrStopped and waits until it
// has returned.
func (s *Func) Stop() {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	cancel, stopped := s.cancel, s.stopped
	s.mu.Unlock()
	if stopped == nil {
		return
	}
	cancel(ErrStopped)
	<-stopped
}

// Stopped returns a channel closed once the current run has returned (closed already when
// none is under way).
func (s *Func) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		return closed
	}
	return s.stopped
}

// running reports whether a run is under way.
func (s *Func) running() bool {
	select {
	case <-s.Stopped():
		return false
	default:
		return true
	}
}

// closed is the channel Stopped returns for a service never started.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// StartAll starts services in order. When one fails to start it stops those already
// started, last first, and returns its error.
func StartAll(ctx context.Context, services ...Service) error {
	for i, s := range services {
		if err := s.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				services[j].Stop()
			}
			return err
		}
	}
	return nil
}

// StopAll stops services one after the other, in the order given: each has ended before
// the next is told to stop.
func StopAll(services ...Service) {
	for _, s := range services {
		s.Stop()
	}
}

// Sleep waits d, or until ctx ends, and reports whether the whole d passed: the pause of a
// background loop that must stop promptly.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
