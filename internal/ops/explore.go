// SPDX-License-Identifier: Apache-2.0

package ops

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/schema"
)

// The dashboard's message explorer: find any row, whatever its status, by msg_id, by key
// (msg_keys), by sharding key, or by topic, tag and status within a time window; then read
// one row. Every statement reads an index or a bounded range of the primary key:
//   - msg_id: the unique key uk_msg_id;
//   - sharding key: idx_sharding_id (sharding_key, id), newest first, keyset on id;
//   - anything else (a key in msg_keys, which no index covers; topic, tag, status): a time
//     window, turned into a range of ids by a binary search on the primary key (ids grow with
//     create_time), then scanned newest first at most ScanRows ids per call.

// ScanRows is the most ids one window search reads; the page says where it stopped, and the
// next call goes on from there.
const ScanRows = 50000

// scanRows is ScanRows; tests lower it.
var scanRows int64 = ScanRows

// MaxSearchLimit is the most rows one search returns.
const MaxSearchLimit = 100

// Search selects rows for the explorer. MsgID, if set, wins; else ShardingKey; else a window
// (From and To, required) with the other conditions. Conditions are ANDed.
type Search struct {
	MsgID       string
	Key         string // one key of msg_keys (space-separated), or the msg_id of a row without keys
	ShardingKey string
	Topic, Tag  string // exact
	// Status is the row's status, or -1 for any.
	Status int
	// From and To bound create_time (database clock), To excluded.
	From, To time.Time
}

// Found is a row of the explorer, without its body.
type Found struct {
	ID            int64     `json:"id"`
	MsgID         string    `json:"msg_id"`
	Topic         string    `json:"topic"`
	Tag           string    `json:"tag"`
	Status        int       `json:"status"`
	RetryCount    int       `json:"retry_count"`
	MaxRetryCount int       `json:"max_retry_count"`
	FailReason    string    `json:"fail_reason"`
	MsgKeys       string    `json:"msg_keys"`
	ShardingKey   string    `json:"sharding_key"`
	CreateTime    time.Time `json:"create_time"`
	UpdateTime    time.Time `json:"update_time"`
	// NextRetryTime is epoch ms: when an unsent row is due, when a sent or dead row was
	// settled. SentTime is epoch ms of the broker's acknowledgement, 0 when unknown.
	NextRetryTime int64 `json:"next_retry_time"`
	SentTime      int64 `json:"sent_time"`
	Deleted       bool  `json:"deleted"`
}

// SearchPage is one page of a search.
type SearchPage struct {
	Messages []Found `json:"messages"`
	// Plan names how the rows were found: "msg_id", "sharding_key" or "window".
	Plan string `json:"plan"`
	// Before continues the search (rows with a smaller id); 0 when it is over.
	Before int64 `json:"before"`
	// ScannedFrom and ScannedTo are the ids a window search read this call (0 otherwise);
	// FirstID is the window's first id.
	ScannedFrom int64 `json:"scanned_from,omitempty"`
	ScannedTo   int64 `json:"scanned_to,omitempty"`
	FirstID     int64 `json:"first_id,omitempty"`
}

// foundCols reads an adopted table's nullable columns as the relay does (schema/nulls.go): a
// NULL status as -1 (unknown), the counts and times as their defaults, texts as empty.
const foundCols = "id, COALESCE(msg_id, ''), COALESCE(topic, ''), COALESCE(tag, ''), COALESCE(status, -1), " + schema.RetryCountSQL + ", " +
	schema.MaxRetrySQL + ", COALESCE(fail_reason, ''), COALESCE(msg_keys, ''), COALESCE(sharding_key, ''), COALESCE(UNIX_TIMESTAMP(create_time), 0)," +
	" COALESCE(UNIX_TIMESTAMP(update_time), 0), " + schema.NextRetrySQL + ", COALESCE(sent_time, 0), COALESCE(is_deleted, 0) <> 0"

// The explorer's statements ({W}: the extra conditions).
const (
	sqlFindMsgID    = "SELECT " + foundCols + " FROM {T} WHERE msg_id = ?{W}"
	sqlFindSharding = "SELECT " + foundCols + " FROM {T} WHERE sharding_key = ? AND id < ?{W} ORDER BY id DESC LIMIT ?"
	sqlFindWindow   = "SELECT " + foundCols + " FROM {T} FORCE INDEX (PRIMARY) WHERE id BETWEEN ? AND ?{W} ORDER BY id DESC LIMIT ?"
	sqlIDBounds     = "SELECT COALESCE(MIN(id), 0), COALESCE(MAX(id), 0) FROM {T}"
	sqlIDAt         = "SELECT id, UNIX_TIMESTAMP(create_time) FROM {T} WHERE id >= ? ORDER BY id LIMIT 1"
)

// conditions returns the extra conditions of s for the chosen plan.
func (s Search) conditions(plan string) (string, []any) {
	var w strings.Builder
	var args []any
	add := func(cond string, a ...any) { w.WriteString(" AND " + cond); args = append(args, a...) }
	if s.Key != "" && plan != "msg_id" {
		add("(CONCAT(' ', msg_keys, ' ') LIKE ? ESCAPE '!' OR (msg_keys = '' AND msg_id = ?))",
			"% "+likeEscaper.Replace(s.Key)+" %", s.Key)
	}
	if s.ShardingKey != "" && plan != "sharding_key" {
		add("sharding_key = ?", s.ShardingKey)
	}
	if s.Topic != "" {
		add("topic = ?", s.Topic)
	}
	if s.Tag != "" {
		add("tag = ?", s.Tag)
	}
	if s.Status >= 0 {
		add("status = ?", s.Status)
	}
	if plan == "window" {
		add("create_time >= FROM_UNIXTIME(?) AND create_time < FROM_UNIXTIME(?)", s.From.Unix(), s.To.Unix())
	}
	return w.String(), args
}

// SearchMessages returns up to limit rows of table matching s, newest first, with ids below
// before (0: from the newest).
func SearchMessages(ctx context.Context, db *sql.DB, table string, s Search, before int64, limit int) (SearchPage, error) {
	if limit <= 0 || limit > MaxSearchLimit {
		limit = MaxSearchLimit
	}
	if strings.ContainsAny(s.Key, " \t\r\n") {
		return SearchPage{}, errors.New("a key holds no space: give one key of msg_keys")
	}
	switch {
	case s.MsgID != "":
		return findMsgID(ctx, db, table, s)
	case s.ShardingKey != "":
		return findSharding(ctx, db, table, s, before, limit)
	case s.From.IsZero() || s.To.IsZero() || !s.From.Before(s.To):
		return SearchPage{}, errors.New("give a msg_id, a sharding key, or a time window (from before to): a search by key, topic or status scans the rows created in a window")
	}
	return findWindow(ctx, db, table, s, before, limit)
}

func findMsgID(ctx context.Context, db *sql.DB, table string, s Search) (SearchPage, error) {
	w, args := s.conditions("msg_id")
	got, err := findRows(ctx, db, table, sqlFindMsgID, w, append([]any{s.MsgID}, args...))
	return SearchPage{Messages: got, Plan: "msg_id"}, err
}

func findSharding(ctx context.Context, db *sql.DB, table string, s Search, before int64, limit int) (SearchPage, error) {
	if before <= 0 {
		before = 1<<63 - 1
	}
	w, args := s.conditions("sharding_key")
	got, err := findRows(ctx, db, table, sqlFindSharding, w, append(append([]any{s.ShardingKey, before}, args...), limit))
	p := SearchPage{Messages: got, Plan: "sharding_key"}
	if len(got) == limit {
		p.Before = got[len(got)-1].ID
	}
	return p, err
}

// findWindow scans at most ScanRows ids of the window's range, newest first, from before.
func findWindow(ctx context.Context, db *sql.DB, table string, s Search, before int64, limit int) (SearchPage, error) {
	p := SearchPage{Messages: []Found{}, Plan: "window"}
	first, last, err := WindowIDs(ctx, db, table, s.From, s.To)
	if err != nil || last == 0 {
		return p, err
	}
	hi := last
	if before > 0 {
		hi = min(hi, before-1)
	}
	if hi < first {
		return p, nil
	}
	lo := max(first, hi-scanRows+1)
	w, args := s.conditions("window")
	p.Messages, err = findRows(ctx, db, table, sqlFindWindow, w, append(append([]any{lo, hi}, args...), limit))
	p.ScannedFrom, p.ScannedTo, p.FirstID = lo, hi, first
	switch {
	case len(p.Messages) == limit:
		p.Before = p.Messages[limit-1].ID
		p.ScannedFrom = p.Before
	case lo > first:
		p.Before = lo
	}
	return p, err
}

func findRows(ctx context.Context, db *sql.DB, table, stmt, w string, args []any) ([]Found, error) {
	s, err := query(stmt, table)
	if err != nil {
		return nil, err
	}
	rows, err := db.QueryContext(ctx, strings.Replace(s, "{W}", w, 1), args...)
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", table, err)
	}
	out := []Found{}
	for rows.Next() {
		var f Found
		var created, updated int64
		if err := rows.Scan(&f.ID, &f.MsgID, &f.Topic, &f.Tag, &f.Status, &f.RetryCount, &f.MaxRetryCount, &f.FailReason,
			&f.MsgKeys, &f.ShardingKey, &created, &updated, &f.NextRetryTime, &f.SentTime, &f.Deleted); err != nil {
			rows.Close()
			return nil, fmt.Errorf("search %s: %w", table, err)
		}
		f.CreateTime, f.UpdateTime = time.Unix(created, 0).UTC(), time.Unix(updated, 0).UTC()
		out = append(out, f)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("search %s: %w", table, err)
	}
	return out, nil
}

// WindowIDs returns the range of ids of the rows created in [from, to): the first id whose
// create_time is from or later and the last id whose create_time is before to, found by a
// binary search over the primary key (a few dozen point reads, whatever the table's size). It
// relies on ids growing with create_time, as AUTO_INCREMENT ids do; a row written with an
// explicit id out of time order may fall outside. last is 0 when no row is in the window.
func WindowIDs(ctx context.Context, db *sql.DB, table string, from, to time.Time) (first, last int64, err error) {
	s, err := query(sqlIDBounds, table)
	if err != nil {
		return 0, 0, err
	}
	var lo, hi int64
	if err := db.QueryRowContext(ctx, s).Scan(&lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("id range of %s: %w", table, err)
	}
	if hi == 0 {
		return 0, 0, nil
	}
	first, err = firstIDFrom(ctx, db, table, lo, hi, from.Unix())
	if err != nil || first == 0 {
		return 0, 0, err
	}
	next, err := firstIDFrom(ctx, db, table, first, hi, to.Unix())
	switch {
	case err != nil:
		return 0, 0, err
	case next == 0:
		return first, hi, nil
	case next == first:
		return 0, 0, nil // nothing created in the window
	}
	return first, next - 1, nil
}

// firstIDFrom returns the smallest id in [lo, hi] of a row created at t or later, 0 when
// there is none.
func firstIDFrom(ctx context.Context, db *sql.DB, table string, lo, hi, t int64) (int64, error) {
	s, err := query(sqlIDAt, table)
	if err != nil {
		return 0, err
	}
	found := int64(0)
	for lo <= hi {
		mid := lo + (hi-lo)/2
		var id, created int64
		err := db.QueryRowContext(ctx, s, mid).Scan(&id, &created)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && id > hi) {
			hi = mid - 1
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("find the ids of a time window in %s: %w", table, err)
		}
		if created >= t {
			found, hi = id, mid-1
		} else {
			lo = id + 1
		}
	}
	return found, nil
}

// ErrNoMessage is returned by MessageBody for a row that does not exist.
var ErrNoMessage = errors.New("no message with this id")

// MessageDetail is one row of any status with its body.
type MessageDetail struct {
	Found
	Content      string `json:"content"`
	ContentChars int64  `json:"content_chars"`
	Truncated    bool   `json:"truncated"`
	Properties   string `json:"properties"`
}

const sqlMessageBody = "SELECT LEFT(content, ?), CHAR_LENGTH(content), COALESCE(properties, '') FROM {T} WHERE id = ?"

// MessageByID returns the row id of table, any status, without its body.
func MessageByID(ctx context.Context, db *sql.DB, table string, id int64) (Found, error) {
	got, err := findRows(ctx, db, table, "SELECT "+foundCols+" FROM {T} WHERE id = ?{W}", "", []any{id})
	if err != nil {
		return Found{}, err
	}
	if len(got) == 0 {
		return Found{}, ErrNoMessage
	}
	return got[0], nil
}

// MessageBody returns the row id of table, any status, with up to maxChars characters of its body.
func MessageBody(ctx context.Context, db *sql.DB, table string, id int64, maxChars int) (MessageDetail, error) {
	f, err := MessageByID(ctx, db, table, id)
	if err != nil {
		return MessageDetail{}, err
	}
	d := MessageDetail{Found: f}
	s, err := query(sqlMessageBody, table)
	if err != nil {
		return d, err
	}
	err = db.QueryRowContext(ctx, s, maxChars, id).Scan(&d.Content, &d.ContentChars, &d.Properties)
	if errors.Is(err, sql.ErrNoRows) {
		return d, ErrNoMessage // purged between the two reads
	}
	if err != nil {
		return d, fmt.Errorf("read the body of row %d of %s: %w", id, table, err)
	}
	d.Truncated = d.ContentChars > int64(len([]rune(d.Content)))
	return d, nil
}
