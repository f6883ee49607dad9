// SPDX-License-Identifier: Apache-2.0

package idempotency_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/schema"
)

func TestSQLGuardEachOrderAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	const orders, copies, workers = 1000, 3, 8

	counts := deliverAll(t, orders, copies, workers, func(ctx context.Context, sn string) (idempotency.Result, error) {
		return b.Guard.Do(ctx, b.DB, sn, func(ctx context.Context, tx *sql.Tx) error { return applyOrder(ctx, tx, sn) })
	}, idempotency.IsRetryable) // a deadlock or lock wait timeout is redelivered

	assertEachAppliedOnce(t, b.DB.DB, orders)
	if counts[idempotency.Applied] != orders || counts[idempotency.Duplicate] != orders*(copies-1) {
		t.Errorf("outcomes %v, want %d applied and %d duplicates", counts, orders, orders*(copies-1))
	}
	t.Logf("outcomes: %v", counts)
	var rows int
	if err := b.DB.QueryRow("SELECT COUNT(*) FROM outbox_dedupe WHERE consumer_group = 'stock'").Scan(&rows); err != nil || rows != orders {
		t.Fatalf("dedupe rows %d (%v), want %d", rows, err, orders)
	}
}

func TestSQLGuardHandlerFailureRollsBack(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	ctx := context.Background()
	boom := errors.New("insufficient stock")

	out, err := oc(b.Guard.Do(ctx, b.DB, "SN1", func(ctx context.Context, tx *sql.Tx) error {
		if err := applyOrder(ctx, tx, "SN1"); err != nil {
			return err
		}
		return boom // after a write: the write must be rolled back with the dedupe row
	}))
	if out != idempotency.Failed || !errors.Is(err, boom) {
		t.Fatalf("failing handler: %v, %v; want failed wrapping the handler's error", out, err)
	}
	if n := appliedCount(t, b.DB.DB, "SN1"); n != 0 {
		t.Fatalf("business write survived the failure (%d)", n)
	}
	if n := dedupeRows(t, b.DB.DB, "SN1"); n != 0 {
		t.Fatalf("dedupe row survived the failure")
	}
	for i, want := range []idempotency.Outcome{idempotency.Applied, idempotency.Duplicate} {
		out, err := oc(b.Guard.Do(ctx, b.DB, "SN1", func(ctx context.Context, tx *sql.Tx) error { return applyOrder(ctx, tx, "SN1") }))
		if out != want || err != nil {
			t.Fatalf("redelivery %d: %v, %v; want %v", i+1, out, err, want)
		}
	}
	if n := appliedCount(t, b.DB.DB, "SN1"); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
}

// A consumer dies in the middle of its transaction (its connection is killed while the
// effect is written and the dedupe row locked): a duplicate waiting on the row lock, or
// arriving later, applies the effect once; the dead consumer's commit fails.
func TestSQLGuardConsumerDiesMidTransaction(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	ctx := context.Background()
	const sn = "SN1"

	connID := make(chan int64, 1)
	killed := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		out, err := oc(b.Guard.Do(ctx, b.DB, sn, func(ctx context.Context, tx *sql.Tx) error {
			if err := applyOrder(ctx, tx, sn); err != nil {
				return err
			}
			var id int64
			if err := tx.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				return err
			}
			connID <- id
			<-killed
			return nil // wakes up believing it succeeded
		}))
		if out != idempotency.Failed {
			err = errors.Join(err, errors.New("dead consumer's outcome is "+out.String()+", want failed"))
		} else {
			err = nil
		}
		first <- err
	}()

	id := <-connID
	second := make(chan error, 1)
	go func() { // a duplicate that blocks on the dedupe row's lock, or arrives after the kill
		out, err := oc(b.Guard.Do(ctx, b.DB, sn, func(ctx context.Context, tx *sql.Tx) error { return applyOrder(ctx, tx, sn) }))
		if out != idempotency.Applied || err != nil {
			err = errors.Join(err, errors.New("takeover outcome is "+out.String()+", want applied"))
		}
		second <- err
	}()
	if _, err := b.DB.ExecContext(ctx, "KILL CONNECTION ?", id); err != nil {
		t.Fatalf("kill consumer's connection: %v", err)
	}
	close(killed)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if n := appliedCount(t, b.DB.DB, sn); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
}

func TestSQLGuardBadKeys(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	ctx := context.Background()
	called := false
	fn := func(context.Context, *sql.Tx) error { called = true; return nil }

	if out, err := oc(b.Guard.Do(ctx, b.DB, "", fn)); out != idempotency.Failed || !errors.Is(err, idempotency.ErrNoKey) {
		t.Errorf("empty key: %v, %v; want ErrNoKey", out, err)
	}
	long := strings.Repeat("x", idempotency.MaxSQLKeyLen+1)
	if out, err := oc(b.Guard.Do(ctx, b.DB, long, fn)); out != idempotency.Failed || !errors.Is(err, idempotency.ErrInvalidKey) {
		t.Errorf("long key: %v, %v; want ErrInvalidKey", out, err)
	}
	if called {
		t.Error("handler called for a bad key")
	}
	// Keys compare byte for byte: case, trailing spaces and lookalikes are distinct orders.
	for _, key := range []string{"sn-a", "SN-A", "SN-A ", "SN-Ä", strings.Repeat("y", idempotency.MaxSQLKeyLen)} {
		if out, err := oc(b.Guard.Do(ctx, b.DB, key, fn)); out != idempotency.Applied || err != nil {
			t.Errorf("key %q: %v, %v; want applied", key, out, err)
		}
	}
}

func TestSQLGuardGroupsAndPurge(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	ctx := context.Background()
	points, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "points"})
	if err != nil {
		t.Fatal(err)
	}
	nop := func(context.Context, *sql.Tx) error { return nil }
	for _, g := range []*idempotency.SQLGuard{b.Guard, points} {
		if out, err := oc(g.Do(ctx, b.DB, "SN1", nop)); out != idempotency.Applied || err != nil {
			t.Fatalf("%v, %v; want each group to apply", out, err)
		}
	}
	if _, err := b.DB.Exec("UPDATE outbox_dedupe SET created_at = NOW(6) - INTERVAL 10 DAY WHERE consumer_group = 'stock'"); err != nil {
		t.Fatal(err)
	}
	if n, err := b.Guard.Purge(ctx, b.DB, 7*24*time.Hour, 100); n != 1 || err != nil {
		t.Fatalf("purge: %d, %v; want 1 row", n, err)
	}
	if out, _ := oc(points.Do(ctx, b.DB, "SN1", nop)); out != idempotency.Duplicate {
		t.Fatalf("purge of group stock touched group points: %v", out)
	}
	if err := b.Guard.CreateTable(ctx, b.DB); err != nil {
		t.Fatalf("CreateTable on an existing table: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, field string
		err         error
	}{
		{"guard without group", "Group", func() error {
			_, err := idempotency.NewGuard(&idempotency.RedisStore{}, idempotency.Config{})
			return err
		}()},
		{"guard negative TTL", "ClaimTTL", func() error {
			_, err := idempotency.NewGuard(&idempotency.RedisStore{}, idempotency.Config{Group: "g", ClaimTTL: -1})
			return err
		}()},
		{"guard group with colon", "Group", func() error {
			_, err := idempotency.NewGuard(&idempotency.RedisStore{}, idempotency.Config{Group: "a:b"})
			return err
		}()},
		{"sql without group", "Group", func() error { _, err := idempotency.NewSQLGuard(idempotency.SQLConfig{}); return err }()},
		{"sql table injection", "Table", func() error {
			_, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "g", Table: "t; DROP TABLE x"})
			return err
		}()},
		{"sql table leading digit", "Table", func() error {
			_, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "g", Table: "1t"})
			return err
		}()},
		{"sql table too long", "Table", func() error {
			_, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "g", Table: strings.Repeat("t", 65)})
			return err
		}()},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.field) {
			t.Errorf("%s: error %v, want one naming %s", tc.name, tc.err, tc.field)
		}
	}
	if _, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: "g", Table: strings.Repeat("t", 64)}); err != nil {
		t.Errorf("64-character table name rejected: %v", err)
	}
}

// DoTx joins the caller's transaction: the dedupe row, the effect and the caller's own
// writes commit or roll back together, and a duplicate leaves the transaction usable.
func TestSQLGuardDoTxJoinsCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setupSQL(t)
	ctx := context.Background()
	if _, err := b.DB.Exec("CREATE TABLE audit (id int AUTO_INCREMENT PRIMARY KEY, note varchar(64))"); err != nil {
		t.Fatal(err)
	}
	attempt := func(commit bool) idempotency.Result {
		t.Helper()
		tx, err := b.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO audit (note) VALUES ('delivery')"); err != nil {
			t.Fatal(err)
		}
		res, err := b.Guard.DoTx(ctx, tx, "orders:paid:SN1", func(ctx context.Context) error { return applyOrder(ctx, tx, "SN1") })
		if err != nil {
			t.Fatalf("DoTx: %v", err)
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatalf("commit after %v: %v", res.Outcome, err)
			}
		}
		return res
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := b.DB.QueryRow(q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if res := attempt(false); res.Outcome != idempotency.Applied { // the caller rolls back
		t.Fatalf("first attempt: %v, want applied (in the transaction)", res.Outcome)
	}
	if n := appliedCount(t, b.DB.DB, "SN1"); n != 0 || dedupeRows(t, b.DB.DB, "orders:paid:SN1") != 0 || count("SELECT COUNT(*) FROM audit") != 0 {
		t.Fatal("a rolled-back transaction kept the effect, the dedupe row or the caller's write")
	}
	for i, want := range []idempotency.Outcome{idempotency.Applied, idempotency.Duplicate} {
		if res := attempt(true); res.Outcome != want {
			t.Fatalf("delivery %d: %v, want %v", i+1, res.Outcome, want)
		}
	}
	if n := appliedCount(t, b.DB.DB, "SN1"); n != 1 {
		t.Fatalf("applied %d times, want 1", n)
	}
	if n := count("SELECT COUNT(*) FROM audit"); n != 2 {
		t.Fatalf("%d audit rows, want 2: the duplicate's transaction must stay usable and commit", n)
	}

	// A failing effect: the error says redeliver, and the caller's rollback removes the row.
	tx, err := b.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("refund service down")
	res, err := b.Guard.DoTx(ctx, tx, "orders:refunded:SN1", func(context.Context) error { return boom })
	if res.Outcome != idempotency.Failed || !errors.Is(err, boom) {
		t.Fatalf("failing effect: %v, %v; want failed with the error", res.Outcome, err)
	}
	_ = tx.Rollback()
	if n := dedupeRows(t, b.DB.DB, "orders:refunded:SN1"); n != 0 {
		t.Fatal("dedupe row of a failed effect survived the rollback")
	}
}

// SQLGuard keeps the first delivery's fingerprint and returns it on a duplicate; on a dedupe
// table of an earlier version, without the fingerprint column, it keeps none and still
// applies each key once.
func TestSQLGuardFingerprints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupSQL(t)
	do := func(sn, fp string) idempotency.Result {
		t.Helper()
		res, err := b.Guard.DoWithFingerprint(ctx, b.DB, sn, fp, func(ctx context.Context, tx *sql.Tx) error { return applyOrder(ctx, tx, sn) })
		if err != nil {
			t.Fatalf("%s: %v", sn, err)
		}
		return res
	}
	if r := do("SN-1", "fp-a"); r.Outcome != idempotency.Applied {
		t.Fatalf("first delivery: %v", r.Outcome)
	}
	if r := do("SN-1", "fp-b"); r.Outcome != idempotency.Duplicate || r.FirstFingerprint != "fp-a" {
		t.Fatalf("second delivery: %v, first fingerprint %q; want a duplicate of fp-a", r.Outcome, r.FirstFingerprint)
	}
	if _, err := b.DB.Exec("ALTER TABLE " + schema.DedupeDefaultTable + " DROP COLUMN fingerprint"); err != nil {
		t.Fatal(err)
	}
	if r := do("SN-2", "fp-c"); r.Outcome != idempotency.Applied {
		t.Fatalf("without the column, first delivery: %v", r.Outcome)
	}
	if r := do("SN-2", "fp-c"); r.Outcome != idempotency.Duplicate || r.FirstFingerprint != "" {
		t.Fatalf("without the column, second delivery: %v, %q; want a duplicate with no fingerprint", r.Outcome, r.FirstFingerprint)
	}
	assertEachAppliedOnce(t, b.DB.DB, 2)
}
