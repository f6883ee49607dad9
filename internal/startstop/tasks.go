// SPDX-License-Identifier: Apache-2.0

package startstop

import (
	"context"
	"sync"
)

// Tasks is a set of short tasks, each in a goroutine of its own, that its owner stops as one
// service: Stop does not cancel them (each ends by its own work, or its own context), it
// returns once none runs. It suits work that must be finished rather than abandoned, such
// as results to write back. The zero Tasks is ready to use; it must not be copied.
type Tasks struct {
	mu   sync.Mutex
	n    int           // tasks running
	idle chan struct{} // closed while n is 0; nil: never started one
}

// Go runs task in a goroutine of the set.
func (t *Tasks) Go(task func()) {
	t.mu.Lock()
	if t.n == 0 {
		t.idle = make(chan struct{})
	}
	t.n++
	t.mu.Unlock()
	go func() {
		defer t.done()
		task()
	}()
}

// done counts a task's end; the last one running closes the idle channel.
func (t *Tasks) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 {
		close(t.idle)
	}
}

// Start does nothing: the tasks start with Go. It never fails; it makes the set a Service,
// to be stopped in its place among its owner's services (StopAll).
func (t *Tasks) Start(context.Context) error { return nil }

// Stop waits until no task of the set runs, without cancelling any: when it returns, every
// task Go started before Stop was called has ended.
func (t *Tasks) Stop() {
	for {
		t.mu.Lock()
		n, idle := t.n, t.idle
		t.mu.Unlock()
		if n == 0 {
			return
		}
		<-idle
	}
}

// Stopped returns a channel closed once no task runs (closed already when none does).
func (t *Tasks) Stopped() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		return closed
	}
	return t.idle
}
