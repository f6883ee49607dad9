// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/outbox-relay/outbox-relay/internal/outboxsql"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// page is one read of due rows, handed from the scan to the publish stage.
type page struct {
	rows []outboxsql.Row
	// bytes are the bodies' bytes the page holds of Config.MemoryBudget.
	bytes int64
}

// bodyBytes sums the bodies of rows.
func bodyBytes(rows []outboxsql.Row) int64 {
	var n int64
	for i := range rows {
		n += int64(len(rows[i].Content))
	}
	return n
}

// scan reads the rows due at nowMs, failed ones first, in keyset pages of at most BatchSize
// rows and MaxPageBytes of bodies, and hands each page to out. It returns when the due rows
// are read, stop or ctx is done, or a read fails. out holds at most one page, so the scan
// runs one page ahead of the publishing and memory stays bounded by a few pages. Each page
// first takes room in the MemoryBudget and reads no more bodies than that room (plus the
// row that crosses it): with the budget full, the scan waits for bodies to be published.
func (r *Engine) scan(stop, ctx context.Context, nowMs int64, out chan<- *page) error {
	for _, status := range []int{int(outbox.StatusFailed), int(outbox.StatusPending)} {
		c := outboxsql.Cursor{Null: true, Next: math.MinInt64, ID: math.MinInt64} // before any row, however odd its next_retry_time or id
		limit := r.cfg.BatchSize
		for {
			if stop.Err() != nil || ctx.Err() != nil {
				return nil
			}
			room, err := r.cfg.MemoryBudget.reserve(ctx, stop, int64(r.cfg.MaxPageBytes))
			if err != nil {
				return nil // stop or ctx ended while the budget was full
			}
			rows, full, cut, err := r.ReadPage(ctx, status, nowMs, c, limit, room)
			pg := &page{rows: rows, bytes: bodyBytes(rows)}
			r.cfg.MemoryBudget.settle(room, pg.bytes)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				break
			}
			last := rows[len(rows)-1]
			c = outboxsql.Cursor{Null: last.NextNull, Next: last.NextRetry, ID: last.ID}
			select {
			case out <- pg:
			case <-ctx.Done():
				r.cfg.MemoryBudget.release(pg.bytes)
				return nil
			}
			switch {
			case cut:
				limit = max(1, len(rows)) // bodies are large here: read fewer rows per page
			case full:
				limit = min(r.cfg.BatchSize, limit*2)
			default:
				limit = 0 // the last page of this status
			}
			if limit == 0 {
				break
			}
		}
	}
	return nil
}

// ReadPage reads up to limit due rows of one status after c. It stops early, cut, when the
// bodies read reach maxBytes (the row that reaches it is kept, so a page has at least one
// row); full says the page had limit rows.
func (r *Engine) ReadPage(ctx context.Context, status int, nowMs int64, c outboxsql.Cursor, limit int, maxBytes int64) (rows []outboxsql.Row, full, cut bool, err error) {
	if err := r.store.ScanIndex(ctx); err != nil {
		return nil, false, false, err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.QueryTimeout)
	defer cancel()
	q, args := r.store.PageQuery(status, nowMs, c, limit, r.cfg.MaxBodyBytes)
	res, err := r.store.Query(ctx, q, args...)
	if err != nil {
		return nil, false, false, fmt.Errorf("read due rows of %s: %w", r.cfg.Table, err)
	}
	defer res.Close()
	rows = make([]outboxsql.Row, 0, min(limit, 512))
	var bytes int64
	var names interner
	var bodies arena
	var topic, tag, content sql.RawBytes // escape to the heap once per page, not per row
	for res.Next() {
		rows = append(rows, outboxsql.Row{}) // scanned in place: a row is 200 bytes
		rw := &rows[len(rows)-1]
		if err := res.Scan(&rw.ID, &rw.MsgID, &topic, &tag, &content, &rw.ContentLen, &rw.Keys, &rw.ShardingKey,
			&rw.Properties, &rw.RetryCount, &rw.MaxRetries, &rw.NextNull, &rw.NextRetry); err != nil {
			return nil, false, false, fmt.Errorf("read due rows of %s: %w", r.cfg.Table, err)
		}
		rw.Topic, rw.Tag = names.get(topic), names.get(tag)
		if content != nil {
			rw.Content = bodies.copy(content)
		}
		bytes += int64(len(rw.Content))
		if bytes >= maxBytes && len(rows) < limit {
			return rows, false, true, nil // the rest of the page is read again next time
		}
	}
	if err := res.Err(); err != nil {
		return nil, false, false, fmt.Errorf("read due rows of %s: %w", r.cfg.Table, err)
	}
	return rows, len(rows) == limit, false, nil
}

// interner hands out one string per distinct value among a page's topics and tags, which
// repeat from row to row: two allocations a row fewer.
type interner map[string]string

func (in *interner) get(b []byte) string {
	if s, ok := (*in)[string(b)]; ok { // no allocation for the lookup
		return s
	}
	if *in == nil {
		*in = interner{}
	}
	s := string(b)
	(*in)[s] = s
	return s
}

// arenaChunk is the size of the blocks a page's bodies are copied into.
const arenaChunk = 64 << 10

// arena copies a page's bodies into shared blocks: one allocation per 64 KiB of bodies
// instead of one per row. A body keeps its block alive, and the page drops its bodies once
// they are published.
type arena struct{ buf []byte }

func (a *arena) copy(b []byte) []byte {
	if len(b) == 0 {
		return []byte{} // an empty body, not a missing one
	}
	if len(b) > cap(a.buf)-len(a.buf) {
		if len(b) >= arenaChunk/4 {
			return append(make([]byte, 0, len(b)), b...) // large bodies get a block of their own
		}
		a.buf = make([]byte, 0, arenaChunk)
	}
	start := len(a.buf)
	a.buf = append(a.buf, b...)
	return a.buf[start:len(a.buf):len(a.buf)]
}
