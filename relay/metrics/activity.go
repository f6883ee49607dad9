// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"sync"
	"time"
)

// ActivityMinutes is how many minutes of sent, failed and dead counts a table's metrics keep
// in memory for the dashboard (Metrics.Activity).
const ActivityMinutes = 60

// MinuteActivity is what this process did to one table's rows in one minute of its clock:
// the same counts as outbox_relay_published_total, outbox_relay_failed_total (every failed
// attempt, deferred ones included) and outbox_relay_dead_total.
type MinuteActivity struct {
	// Start is the minute's start, epoch seconds.
	Start  int64 `json:"start"`
	Sent   int64 `json:"sent"`
	Failed int64 `json:"failed"`
	Dead   int64 `json:"dead"`
}

// minuteRing keeps the counts of the last ActivityMinutes minutes, one slot a minute, fed by
// the relay's recorder as it updates the Prometheus counters. A slot is reused when its
// minute comes round again, so nothing is appended and nothing runs in the background.
type minuteRing struct {
	now func() time.Time

	mu    sync.Mutex
	slots [ActivityMinutes]MinuteActivity
}

// add counts sent, failed and dead now.
func (r *minuteRing) add(sent, failed, dead int) {
	if r == nil {
		return
	}
	m := r.now().Unix() / 60 * 60
	r.mu.Lock()
	defer r.mu.Unlock()
	s := &r.slots[(m/60)%ActivityMinutes]
	if s.Start != m {
		*s = MinuteActivity{Start: m}
	}
	s.Sent += int64(sent)
	s.Failed += int64(failed)
	s.Dead += int64(dead)
}

// last returns the last ActivityMinutes minutes, oldest first, the current minute last;
// minutes without counts are zero.
func (r *minuteRing) last() []MinuteActivity {
	m := r.now().Unix() / 60 * 60
	out := make([]MinuteActivity, ActivityMinutes)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range out {
		start := m - int64(ActivityMinutes-1-i)*60
		out[i] = MinuteActivity{Start: start}
		if s := r.slots[(start/60)%ActivityMinutes]; s.Start == start {
			out[i] = s
		}
	}
	return out
}

// Activity returns what this process counted for table of database (as named in
// Config.Database) in each of the last ActivityMinutes minutes, oldest first; nil when it
// never relayed that table. It is the dashboard's chart: it moves whenever rows are sent,
// fail or die, whatever the database answers.
func (m *Metrics) Activity(database, table string) []MinuteActivity {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	t := m.tables[[2]string{database, table}]
	m.mu.Unlock()
	if t == nil {
		return nil
	}
	return t.minutes.last()
}

// SetClock replaces the clock of m's activity minutes, for tests; call it before m records
// anything (before the relays given m are made).
func (m *Metrics) SetClock(now func() time.Time) { m.now = now }
