package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// writerFlags shape the application's transactions.
type writerFlags struct {
	writers  int
	rate     float64 // transactions per second, all writers together
	holdFrac float64 // share of transactions held open before commit
	holdMax  time.Duration
	rollback float64 // share rolled back
}

func (f *writerFlags) register(fs *flag.FlagSet, rate float64) {
	fs.IntVar(&f.writers, "writers", 8, "concurrent writers")
	fs.Float64Var(&f.rate, "rate", rate, "target transactions per second, all writers together")
	fs.Float64Var(&f.holdFrac, "hold-share", 0.25, "share of transactions held open after their inserts")
	fs.DurationVar(&f.holdMax, "hold-max", 50*time.Millisecond, "a held transaction waits uniformly up to this long before commit")
	fs.Float64Var(&f.rollback, "rollback-share", 0.2, "share of transactions rolled back")
}

func (f writerFlags) validate() error {
	switch {
	case f.writers < 1:
		return fmt.Errorf("--writers: must be at least 1, got %d", f.writers)
	case f.rate <= 0:
		return fmt.Errorf("--rate: must be positive, got %g", f.rate)
	case f.holdFrac < 0 || f.holdFrac > 1:
		return fmt.Errorf("--hold-share: must be between 0 and 1, got %g", f.holdFrac)
	case f.rollback < 0 || f.rollback > 1:
		return fmt.Errorf("--rollback-share: must be between 0 and 1, got %g", f.rollback)
	}
	return nil
}

// ledger is what the writers did: commit times by msg_id, and the rolled-back msg_ids.
type ledger struct {
	mu         sync.Mutex
	committed  map[string]time.Time
	rolledBack map[string]bool
}

func newLedger() *ledger {
	return &ledger{committed: map[string]time.Time{}, rolledBack: map[string]bool{}}
}

func (l *ledger) commits() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.committed)
}

// app is the application side: a business table and an outbox table written in one
// transaction by the outbox writer.
type app struct {
	db       *sql.DB
	w        *outbox.Writer
	business string
	topic    string
	nudge    bool
}

func newApp(ctx context.Context, db *sql.DB, wr *outbox.Writer, table, topic string, nudge bool) (*app, error) {
	business := table + "_orders"
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+business+
		" (id bigint NOT NULL AUTO_INCREMENT PRIMARY KEY, order_sn varchar(64) NOT NULL, amount int NOT NULL)"); err != nil {
		return nil, fmt.Errorf("create %s: %w", business, err)
	}
	return &app{db: db, w: wr, business: business, topic: topic, nudge: nudge}, nil
}

// write runs the writers until ctx ends and records every outcome in l.
func (a *app) write(ctx context.Context, f writerFlags, l *ledger) error {
	var wg sync.WaitGroup
	errs := make(chan error, f.writers)
	every := time.Duration(float64(time.Second) * float64(f.writers) / f.rate)
	for i := 0; i < f.writers; i++ {
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
				if err := a.tx(context.WithoutCancel(ctx), fmt.Sprintf("%s-%d-%d", a.topic, i, k), f, l); err != nil {
					errs <- err
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
func (a *app) tx(ctx context.Context, id string, f writerFlags, l *ledger) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("writer: begin: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+a.business+" (order_sn, amount) VALUES (?, ?)", id, rand.IntN(10000)); err != nil {
		return fmt.Errorf("writer: insert order: %w", err)
	}
	if err := a.w.Insert(ctx, tx, outbox.Message{MsgID: id, Topic: a.topic, Tag: "created", Keys: []string{id},
		Body: []byte(`{"orderSn":"` + id + `","event":"created"}`)}); err != nil {
		return fmt.Errorf("writer: insert outbox row: %w", err)
	}
	if rand.Float64() < f.holdFrac {
		time.Sleep(time.Duration(rand.Int64N(int64(f.holdMax) + 1)))
	}
	if rand.Float64() < f.rollback {
		if err := tx.Rollback(); err != nil {
			return fmt.Errorf("writer: rollback: %w", err)
		}
		l.mu.Lock()
		l.rolledBack[id] = true
		l.mu.Unlock()
		return nil
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("writer: commit: %w", err)
	}
	at := time.Now()
	l.mu.Lock()
	l.committed[id] = at
	l.mu.Unlock()
	if a.nudge {
		if err := a.w.Nudge(ctx); err != nil {
			return err
		}
	}
	return nil
}
