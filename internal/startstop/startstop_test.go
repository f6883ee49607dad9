// SPDX-License-Identifier: Apache-2.0

package startstop_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// loop is a service counting its runs and running ones, each until its context ends.
type loop struct {
	runs, running atomic.Int32
	cause         atomic.Value // the last run's context cause
}

func (l *loop) service() *startstop.Func {
	return startstop.New(func(ctx context.Context) {
		l.runs.Add(1)
		l.running.Add(1)
		defer l.running.Add(-1)
		<-ctx.Done()
		l.cause.Store(context.Cause(ctx))
	})
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestStartTwiceRunsOnce: a second Start while the service runs starts nothing.
func TestStartTwiceRunsOnce(t *testing.T) {
	var l loop
	s := l.service()
	ctx := context.Background()
	for range 2 {
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer s.Stop()
	testenv.Eventually(t, 5*time.Second, "the run started", func() bool { return l.running.Load() == 1 })
	if n := l.runs.Load(); n != 1 {
		t.Fatalf("%d runs after two Starts, want 1", n)
	}
	if isClosed(s.Stopped()) {
		t.Fatal("Stopped is closed while the service runs")
	}
}

// TestStopWaitsForTheRun: Stop returns only once the run has returned, and the run's
// context says it was stopped (ErrStopped), not that its parent ended.
func TestStopWaitsForTheRun(t *testing.T) {
	var finished atomic.Bool
	release := make(chan struct{})
	s := startstop.New(func(ctx context.Context) {
		<-ctx.Done()
		<-release // the run's own ending work, which Stop must wait for
		finished.Store(true)
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		s.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while the run was still going")
	case <-time.After(50 * time.Millisecond): // no timing asserted: Stop must not return at all yet
	}
	close(release)
	<-stopped
	if !finished.Load() {
		t.Fatal("Stop returned before the run did")
	}
	if !isClosed(s.Stopped()) {
		t.Fatal("Stopped not closed after Stop")
	}
}

// TestStopTwiceAndBeforeStart: Stop of a service never started, and a second Stop, do
// nothing and return at once; Stopped of a service never started is closed.
func TestStopTwiceAndBeforeStart(t *testing.T) {
	var l loop
	s := l.service()
	s.Stop()
	if !isClosed(s.Stopped()) {
		t.Fatal("Stopped of a service never started is not closed")
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Stop()
	if got := l.cause.Load(); !errors.Is(got.(error), startstop.ErrStopped) {
		t.Fatalf("the run's context cause is %v, want ErrStopped", got)
	}
	if n := l.running.Load(); n != 0 {
		t.Fatalf("%d runs still running after Stop", n)
	}
}

// TestRunThatReturnsOnItsOwn: a run that ends by itself leaves the service stopped (Stopped
// closed, Stop returns at once), and a later Start runs it again.
func TestRunThatReturnsOnItsOwn(t *testing.T) {
	var runs atomic.Int32
	s := startstop.New(func(context.Context) { runs.Add(1) })
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-s.Stopped()
	s.Stop()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-s.Stopped()
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}

// TestParentContextEndsTheRun: the run ends with the context Start was given, Stop or not.
func TestParentContextEndsTheRun(t *testing.T) {
	var l loop
	s := l.service()
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-s.Stopped()
	if got := l.cause.Load(); !errors.Is(got.(error), context.Canceled) {
		t.Fatalf("the run's context cause is %v, want context.Canceled", got)
	}
}

// TestStartWaitsUntilReady: Start returns only once the run said it is ready.
func TestStartWaitsUntilReady(t *testing.T) {
	var ready atomic.Bool
	s := startstop.NewReady(func(ctx context.Context, signal func()) {
		ready.Store(true)
		signal()
		<-ctx.Done()
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if !ready.Load() {
		t.Fatal("Start returned before the run was ready")
	}
}

// TestConcurrentStartAndStop: Starts and Stops from many goroutines at once (run with
// -race) never run two at once, and after a last Stop nothing runs.
func TestConcurrentStartAndStop(t *testing.T) {
	var l loop
	var most atomic.Int32
	s := startstop.New(func(ctx context.Context) {
		n := l.running.Add(1)
		defer l.running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-ctx.Done()
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if (g+i)%2 == 0 {
					_ = s.Start(context.Background())
				} else {
					s.Stop()
				}
				_ = s.Stopped()
			}
		}()
	}
	wg.Wait()
	s.Stop()
	if n := l.running.Load(); n != 0 {
		t.Fatalf("%d runs still running after the last Stop", n)
	}
	if m := most.Load(); m > 1 {
		t.Fatalf("%d runs at once, want at most 1", m)
	}
}

// failing is a service that cannot start.
type failing struct{}

func (failing) Start(context.Context) error { return errors.New("cannot start") }
func (failing) Stop()                       {}
func (failing) Stopped() <-chan struct{}    { return nil }

// TestStartAllStopsThoseStartedWhenOneFails: StartAll stops the services it started before
// the one that failed.
func TestStartAllStopsThoseStartedWhenOneFails(t *testing.T) {
	var a, b loop
	sa, sb := a.service(), b.service()
	err := startstop.StartAll(context.Background(), sa, sb, failing{})
	if err == nil {
		t.Fatal("StartAll succeeded with a service that cannot start")
	}
	if a.running.Load() != 0 || b.running.Load() != 0 {
		t.Fatal("services started before the failing one still run")
	}
}

// TestStopAllStopsInOrder: StopAll stops in the order given, each ended before the next is
// told.
func TestStopAllStopsInOrder(t *testing.T) {
	var mu sync.Mutex
	var ended []string
	svc := func(name string) *startstop.Func {
		return startstop.New(func(ctx context.Context) {
			<-ctx.Done()
			mu.Lock()
			ended = append(ended, name)
			mu.Unlock()
		})
	}
	first, second, third := svc("first"), svc("second"), svc("third")
	if err := startstop.StartAll(context.Background(), first, second, third); err != nil {
		t.Fatal(err)
	}
	startstop.StopAll(third, first, second)
	if got := ended; len(got) != 3 || got[0] != "third" || got[1] != "first" || got[2] != "second" {
		t.Fatalf("stopped in the order %v, want [third first second]", got)
	}
}
