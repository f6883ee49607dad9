// SPDX-License-Identifier: Apache-2.0

package startstop_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// TestTasksStopWaitsWithoutCancelling: Stop of a task set returns only once every task has
// finished its work, none cancelled, and Stopped is open while one runs.
func TestTasksStopWaitsWithoutCancelling(t *testing.T) {
	var tasks startstop.Tasks
	if !isClosed(tasks.Stopped()) {
		t.Fatal("Stopped of a set that never ran a task is not closed")
	}
	tasks.Stop() // nothing runs: returns at once
	release := make(chan struct{})
	var finished atomic.Int32
	for range 3 {
		tasks.Go(func() {
			<-release // the task's own work, which nothing cancels
			finished.Add(1)
		})
	}
	var svc startstop.Service = &tasks
	if isClosed(svc.Stopped()) {
		t.Fatal("Stopped is closed while tasks run")
	}
	stopped := make(chan struct{})
	go func() {
		startstop.StopAll(svc)
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("Stop returned while tasks were still running")
	case <-time.After(50 * time.Millisecond): // no timing asserted: Stop must not return at all yet
	}
	close(release)
	<-stopped
	if n := finished.Load(); n != 3 {
		t.Fatalf("Stop returned with %d of 3 tasks finished", n)
	}
	if !isClosed(tasks.Stopped()) {
		t.Fatal("Stopped not closed after Stop")
	}
}

// TestTasksRunAgainAfterIdle: a set whose tasks all ended runs new ones, and Stop waits for
// those too.
func TestTasksRunAgainAfterIdle(t *testing.T) {
	var tasks startstop.Tasks
	if err := tasks.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	for range 2 {
		release := make(chan struct{})
		tasks.Go(func() { <-release; runs.Add(1) })
		idle := tasks.Stopped()
		close(release)
		<-idle
		tasks.Stop()
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d runs, want 2", n)
	}
}
