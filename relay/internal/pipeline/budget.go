// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"sync"
)

// MemoryBudget bounds the message bodies that the relays of a process hold at once: the
// bodies of the pages read and not yet published, and of the messages of sends still running
// (detached ones included). A scan reads a page only while the budget has room, and reads no
// more bodies than the room it took; it waits otherwise, so the budget holds back reading
// further rows and nothing else: no row is skipped, reordered or failed for it.
//
// The row that crosses a page's room is kept (the page ends with it), so the bodies held may
// exceed the limit by one body per relay reading at that moment; a body larger than the whole
// budget is therefore still read and sent, alone once the others are released. Bodies over
// the relay's MaxBodyBytes are never loaded (they are marked dead by their length).
//
// One MemoryBudget is shared by every relay of a process (relay.Config.MemoryBudget); a nil
// *MemoryBudget bounds nothing.
type MemoryBudget struct {
	limit int64

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed, and replaced, whenever bytes are released
}

// NewMemoryBudget returns a budget of limit bytes of message bodies (at least 1).
func NewMemoryBudget(limit int64) *MemoryBudget {
	return &MemoryBudget{limit: max(1, limit), freed: make(chan struct{})}
}

// Limit returns the budget's limit in bytes (0 for a nil budget: no limit).
func (b *MemoryBudget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Used returns the bytes of bodies held now.
func (b *MemoryBudget) Used() int64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// reserve waits until the budget has room (less than its limit held), then takes
// min(want, room) bytes and returns them. It returns 0 and the error when ctx or stop ends
// first. A nil budget returns want at once.
func (b *MemoryBudget) reserve(ctx, stop context.Context, want int64) (int64, error) {
	if b == nil {
		return want, nil
	}
	for {
		b.mu.Lock()
		if room := b.limit - b.used; room > 0 {
			got := min(want, room)
			b.used += got
			b.mu.Unlock()
			return got, nil
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-stop.Done():
			return 0, stop.Err()
		}
	}
}

// settle turns a reservation of reserved bytes into the used bytes actually held: it takes
// the bytes beyond the reservation without waiting, or releases what was not used.
func (b *MemoryBudget) settle(reserved, used int64) {
	switch {
	case used > reserved:
		b.take(used - reserved)
	case used < reserved:
		b.release(reserved - used)
	}
}

// take adds n held bytes without waiting.
func (b *MemoryBudget) take(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// release gives n bytes back and wakes the scans waiting for room.
func (b *MemoryBudget) release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}
