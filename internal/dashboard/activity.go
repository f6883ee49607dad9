// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/ops"
)

// commitLag keeps each sampled window this far behind the database clock, so that a row
// whose update_time was set just before the boundary but committed just after it is still
// counted (in the window it belongs to).
const commitLag = 2

// activityRing keeps, per table, the outcomes of the last window of time in buckets of width
// seconds (database clock). At start it is filled from the index in one query per table;
// then each tick counts the buckets completed since. Buckets are only appended: a row counts
// under the status it had when its bucket was counted.
type activityRing struct {
	db     *sql.DB
	tables []string
	width  int64 // seconds per bucket
	size   int   // buckets kept
	log    zerolog.Logger

	mu      sync.Mutex
	next    int64 // start of the next bucket to count; 0 before the first fill
	buckets map[string][]ops.Activity
	err     error // the last sampling error, shown until a sample succeeds
}

func newActivityRing(db *sql.DB, tables []string, width, window time.Duration, log zerolog.Logger) *activityRing {
	w := int64(width / time.Second)
	return &activityRing{db: db, tables: tables, width: w, size: int(int64(window/time.Second) / w),
		log: log, buckets: map[string][]ops.Activity{}}
}

// sample counts the buckets completed since the last sample (or, the first time or after a
// gap longer than the ring, the whole window).
func (a *activityRing) sample(ctx context.Context) error {
	now, err := ops.DBClock(ctx, a.db)
	if err != nil {
		a.setErr(err)
		return err
	}
	end := now - commitLag
	a.mu.Lock()
	from := a.next
	a.mu.Unlock()
	if from == 0 || end-from > int64(a.size)*a.width {
		from = end - int64(a.size)*a.width // fill: the whole window, aligned on end
	}
	n := (end - from) / a.width
	if n <= 0 {
		return nil
	}
	to := from + n*a.width
	fresh := map[string][]ops.Activity{}
	for _, t := range a.tables {
		got, err := ops.RecentActivity(ctx, a.db, t, from, to, a.width)
		if err != nil {
			a.setErr(err)
			return err
		}
		fresh[t] = got
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for t, got := range fresh {
		b := append(a.buckets[t], got...)
		if len(b) > a.size {
			b = append([]ops.Activity(nil), b[len(b)-a.size:]...)
		}
		a.buckets[t] = b
	}
	a.next, a.err = to, nil
	return nil
}

func (a *activityRing) setErr(err error) {
	a.mu.Lock()
	a.err = err
	a.mu.Unlock()
}

// run samples every width until ctx ends.
func (a *activityRing) run(ctx context.Context) {
	t := time.NewTicker(time.Duration(a.width) * time.Second)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := a.sample(sctx); err != nil && ctx.Err() == nil {
			a.log.Warn().Err(err).Msg("dashboard: activity sample failed")
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ActivityView is a table's recent activity as the dashboard shows it.
type ActivityView struct {
	// BucketSeconds is the width of each bucket; Buckets are oldest first.
	BucketSeconds int64          `json:"bucket_seconds"`
	Buckets       []ops.Activity `json:"buckets"`
	// Sent, Failed and Dead add up the buckets.
	Sent   int64  `json:"sent"`
	Failed int64  `json:"failed"`
	Dead   int64  `json:"dead"`
	Error  string `json:"error,omitempty"`
}

func (a *activityRing) view(table string) ActivityView {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := ActivityView{BucketSeconds: a.width, Buckets: append([]ops.Activity{}, a.buckets[table]...)}
	for _, b := range v.Buckets {
		v.Sent, v.Failed, v.Dead = v.Sent+b.Sent, v.Failed+b.Failed, v.Dead+b.Dead
	}
	if a.err != nil {
		v.Error = a.err.Error()
	}
	return v
}
