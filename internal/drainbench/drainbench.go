// SPDX-License-Identifier: Apache-2.0

// Package drainbench measures how fast the relay drains a backlog: it fills a temporary
// table, relays it once and prints rows/s. `outbox-relay bench` runs it against the
// configured broker; the development tool internal/cmd/relaybench runs it against the
// in-process test broker. It takes a Publisher, so it never links a broker of its own.
package drainbench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Options are one measure's settings.
type Options struct {
	// Rows is the backlog filled and drained.
	Rows int
	// BodyBytes is the size of each message body.
	BodyBytes int
	// BatchSend sends the messages of one topic in batch requests.
	BatchSend bool
	// Topic is the messages' topic; it must exist on the broker or be auto-created.
	Topic string
	// BatchSize and Concurrency are the relay's relay.batch_size and relay.concurrency.
	BatchSize, Concurrency int
	// MaxBodyBytes is the relay's relay.max_body_bytes (raised to BodyBytes if lower).
	MaxBodyBytes int
	// RecordPositions appends where the broker stored each row to the table's
	// stored-position journal, as with audit.enabled (relay.Config.RecordPositions).
	RecordPositions bool
	// Database and Broker describe where the measure runs, for the report (no secrets).
	Database, Broker string
}

// Validate names the first bad option as a flag.
func (o Options) Validate() error {
	switch {
	case o.Rows < 1:
		return fmt.Errorf("--rows: must be at least 1, got %d", o.Rows)
	case o.BodyBytes < 1 || o.BodyBytes > 4<<20:
		return fmt.Errorf("--body-bytes: must be between 1 and 4194304, got %d", o.BodyBytes)
	case o.Topic == "":
		return errors.New("--topic: must not be empty")
	}
	return nil
}

// Run creates outbox_bench_<random> and its stored-position journal in db, fills it with
// o.Rows due rows, drains it once through pub, writes the figures to out and drops both
// tables (even when ctx is cancelled).
func Run(ctx context.Context, db *sql.DB, pub relay.Publisher, o Options, out io.Writer) error {
	if err := o.Validate(); err != nil {
		return err
	}
	table := "outbox_bench_" + randomHex(4)
	if err := schema.Migrate(ctx, db, table); err != nil {
		return fmt.Errorf("create %s: %w", table, err)
	}
	var dropErr error
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := db.ExecContext(dctx, "DROP TABLE IF EXISTS "+table+", "+schema.StoredLogTable(table)); err != nil {
			dropErr = fmt.Errorf("drop %s by hand: %w", table, err)
			fmt.Fprintln(out, dropErr)
		}
	}()

	fmt.Fprintf(out, "outbox-relay bench: %d rows of %d bytes, batch size %d, concurrency %d, batch send %t\n",
		o.Rows, o.BodyBytes, o.BatchSize, o.Concurrency, o.BatchSend)
	fmt.Fprintf(out, "database %s, table %s (dropped at the end), broker: %s, positions recorded: %t\n", o.Database, table, o.Broker, o.RecordPositions)

	// Warm up the producer (route lookup, connection) so the drain measures steady state.
	if err := pub.Send(ctx, relay.Route{}, &relay.Message{MsgID: "bench-warm-up", Topic: o.Topic, Body: []byte("warm-up")}); err != nil {
		return fmt.Errorf("send to topic %s: %w", o.Topic, err)
	}

	start := time.Now()
	if err := Fill(ctx, db, table, o); err != nil {
		return err
	}
	fillTook := time.Since(start)
	fmt.Fprintf(out, "fill:  %d rows in %s (%.0f rows/s, multi-row INSERT of 1000)\n",
		o.Rows, fillTook.Round(time.Millisecond), float64(o.Rows)/fillTook.Seconds())

	r, err := relay.New(db, nil, pub, relay.Config{
		Table: table, BatchSize: o.BatchSize, Concurrency: o.Concurrency,
		DisableBatchSend: !o.BatchSend, MaxBodyBytes: max(o.MaxBodyBytes, o.BodyBytes), RecordPositions: o.RecordPositions,
	})
	if err != nil {
		return err
	}
	start = time.Now()
	st, err := r.DrainOnce(ctx)
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	fmt.Fprintf(out, "drain: %d rows sent in %s: %.0f rows/s (retried %d, dead %d)\n",
		st.Sent, took.Round(time.Millisecond), float64(st.Sent)/took.Seconds(), st.Retried, st.Dead)
	if st.Sent != o.Rows {
		return fmt.Errorf("only %d of %d rows were sent (retried %d, dead %d): see the log", st.Sent, o.Rows, st.Retried, st.Dead)
	}
	if err := reportJournal(ctx, db, table, o, out); err != nil {
		return err
	}
	return dropErr
}

// reportJournal says how many rows' positions the drain appended to the journal, and fails
// when o.RecordPositions left some out.
func reportJournal(ctx context.Context, db *sql.DB, table string, o Options, out io.Writer) error {
	var rows, entries int64
	err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(row_count), 0), COUNT(*) FROM "+schema.QuoteIdent(schema.StoredLogTable(table))).Scan(&rows, &entries)
	if err != nil {
		return fmt.Errorf("read the stored-position journal: %w", err)
	}
	if !o.RecordPositions {
		return nil
	}
	fmt.Fprintf(out, "journal: %d rows' positions in %d entries\n", rows, entries)
	if rows != int64(o.Rows) {
		return fmt.Errorf("the stored-position journal holds %d rows' positions, not %d: see the log", rows, o.Rows)
	}
	return nil
}

// Fill inserts o.Rows due rows of o.Topic into table with multi-row INSERTs of 1,000 rows.
func Fill(ctx context.Context, db *sql.DB, table string, o Options) error {
	const perStmt = 1000
	body := strings.Repeat("x", o.BodyBytes)
	prefix := "bench-" + randomHex(4) + "-"
	var q strings.Builder
	args := make([]any, 0, 3*perStmt)
	for done := 0; done < o.Rows; {
		k := min(perStmt, o.Rows-done)
		q.Reset()
		args = args[:0]
		q.WriteString("INSERT INTO " + table + " (msg_id, topic, tag, content) VALUES ")
		for i := 0; i < k; i++ {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, 'bench', ?)")
			args = append(args, prefix+strconv.Itoa(done+i), o.Topic, body)
		}
		if _, err := db.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("fill %s: %w", table, err)
		}
		done += k
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
