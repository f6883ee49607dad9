// SPDX-License-Identifier: Apache-2.0

// Package loadgen is an application writing to the outbox the way real services do, for
// benchmarks and soak tests: writers at a target rate, each transaction inserting a business
// row and an outbox row, some held open before commit, some rolled back, a nudge after each
// commit if asked. A Ledger records what was committed (and when) and what was rolled back,
// to check the broker against.
package loadgen

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// Mix shapes the application's transactions.
type Mix struct {
	// Writers is the number of concurrent writers.
	Writers int
	// Rate is the target transactions per second, all writers together.
	Rate float64
	// HoldShare is the share of transactions held open after their inserts, each for a
	// uniform random time up to HoldMax.
	HoldShare float64
	HoldMax   time.Duration
	// RollbackShare is the share of transactions rolled back.
	RollbackShare float64
}

// Validate names the first bad field as a flag of the benchmark tool.
func (m Mix) Validate() error {
	switch {
	case m.Writers < 1:
		return fmt.Errorf("--writers: must be at least 1, got %d", m.Writers)
	case m.Rate <= 0:
		return fmt.Errorf("--rate: must be positive, got %g", m.Rate)
	case m.HoldShare < 0 || m.HoldShare > 1:
		return fmt.Errorf("--hold-share: must be between 0 and 1, got %g", m.HoldShare)
	case m.RollbackShare < 0 || m.RollbackShare > 1:
		return fmt.Errorf("--rollback-share: must be between 0 and 1, got %g", m.RollbackShare)
	}
	return nil
}

// Ledger is what the writers did: commit times by msg_id, and the rolled-back msg_ids.
type Ledger struct {
	mu         sync.Mutex
	committed  map[string]time.Time
	rolledBack map[string]bool
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{committed: map[string]time.Time{}, rolledBack: map[string]bool{}}
}

// Commits is the number of committed transactions so far.
func (l *Ledger) Commits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed)
}

// Committed returns a copy of the commit times by msg_id.
func (l *Ledger) Committed() map[string]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]time.Time, len(l.committed))
	for k, v := range l.committed {
		out[k] = v
	}
	return out
}

// RolledBack returns a copy of the rolled-back msg_ids.
func (l *Ledger) RolledBack() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]bool, len(l.rolledBack))
	for k := range l.rolledBack {
		out[k] = true
	}
	return out
}

// App is the application side: a business table <outbox table>_orders and the outbox
// table, written in one transaction through the outbox writer.
type App struct {
	db       *sql.DB
	w        *outbox.Writer
	business string
	topic    string
	nudge    bool
}

// NewApp creates the business table beside w's outbox table; messages go to topic, and
// every commit is followed by a nudge when nudge is set.
func NewApp(ctx context.Context, db *sql.DB, w *outbox.Writer, topic string, nudge bool) (*App, error) {
	business := w.Table() + "_orders"
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+business+
		" (id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, order_sn varchar(64) NOT NULL, amount int NOT NULL)"); err != nil {
		return nil, fmt.Errorf("loadgen: create %s: %w", business, err)
	}
	return &App{db: db, w: w, business: business, topic: topic, nudge: nudge}, nil
}

// Write runs m.Writers writers until ctx ends and records every outcome in l. msg_ids are
// <topic>-<writer>-<n><suffix>, so runs on one table need different suffixes. It returns
// the first error of a writer (the others stop with it).
func (a *App) Write(ctx context.Context, m Mix, l *Ledger, suffix string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, m.Writers)
	every := time.Duration(float64(time.Second) * float64(m.Writers) / m.Rate)
	for i := 0; i < m.Writers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for k := 0; ; k++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if err := a.tx(context.WithoutCancel(ctx), fmt.Sprintf("%s-%d-%d%s", a.topic, i, k, suffix), m, l); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// tx is one business transaction: an order row and its outbox row, maybe held open, then
// committed (and nudged) or rolled back.
func (a *App) tx(ctx context.Context, id string, m Mix, l *Ledger) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("loadgen: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+a.business+" (order_sn, amount) VALUES (?, ?)", id, rand.IntN(10000)); err != nil {
		return fmt.Errorf("loadgen: insert order: %w", err)
	}
	msg := &outbox.Message{MsgID: id, Topic: a.topic, Tag: "created", Keys: []string{id},
		Body: []byte(`{"orderSn":"` + id + `","event":"created"}`)}
	if err := a.w.Insert(ctx, tx, msg); err != nil {
		return fmt.Errorf("loadgen: insert outbox row: %w", err)
	}
	if rand.Float64() < m.HoldShare {
		time.Sleep(time.Duration(rand.Int64N(int64(m.HoldMax) + 1)))
	}
	if rand.Float64() < m.RollbackShare {
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("loadgen: rollback: %w", err)
		}
		l.mu.Lock()
		l.rolledBack[id] = true
		l.mu.Unlock()
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("loadgen: commit: %w", err)
	}
	at := time.Now()
	l.mu.Lock()
	l.committed[id] = at
	l.mu.Unlock()
	if a.nudge {
		if err := a.w.NudgeFor(ctx, msg); err != nil {
			return err
		}
	}
	return nil
}

// Busy is the production mix the benchmarks and tests run beside the relay: 8 writers at 200
// transactions/s in all, a quarter held open up to 50 ms after their inserts, a fifth rolled
// back, the rest committed.
var Busy = Mix{Writers: 8, Rate: 200, HoldShare: 0.25, HoldMax: 50 * time.Millisecond, RollbackShare: 0.2}

// Start runs a.Write with m in the background, recording in l (a new Ledger when nil), until
// the returned stop is called; stop waits for the writers and returns their first error
// (transactions run to their end whatever the stop, so any error is the database's). stop
// may be called more than once.
func (a *App) Start(m Mix, l *Ledger, suffix string) (stop func() error) {
	if l == nil {
		l = NewLedger()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Write(ctx, m, l, suffix) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}

// StartBusy runs the Busy mix of an App on db through w (orders table "orders") beside a
// benchmark or test until the returned stop is called, or at tb's cleanup; a writer's error
// fails tb. stop may be called more than once.
func StartBusy(tb testing.TB, db *sql.DB, w *outbox.Writer, suffix string) (stop func()) {
	tb.Helper()
	app, err := NewApp(context.Background(), db, w, "orders", false)
	if err != nil {
		tb.Fatal(err)
	}
	stopApp := app.Start(Busy, nil, suffix)
	stop = func() {
		if err := stopApp(); err != nil {
			tb.Error(err)
		}
	}
	tb.Cleanup(stop)
	return stop
}
