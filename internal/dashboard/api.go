// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Limits of the API.
const (
	// maxBodyChars is the longest body returned by /ui/api/message.
	maxBodyChars = 64 << 10
	// maxListed is the most dead rows per page of /ui/api/dead.
	maxListed = 500
	// maxSelected is the most msg_ids one requeue names; larger sets go by filter.
	maxSelected = 1000
	// refreshSeconds is how often the page reloads the overview.
	refreshSeconds = 5
)

// Overview is the answer of GET /ui/api/overview.
type Overview struct {
	// Database names the database (server/schema, as config.DatabaseLabel) when there is one;
	// with several, their labels separated by ", ".
	Database string `json:"database"`
	// Databases lists every database shown, in order.
	Databases []DatabaseView `json:"databases"`
	Now       time.Time      `json:"now"`
	// Admin is true when requeue is allowed (http.admin_token is set).
	Admin bool `json:"admin"`
	// ReadLocked is true when reading message bodies needs a token (http.read_token or
	// http.admin_token).
	ReadLocked     bool  `json:"read_locked"`
	RefreshSeconds int   `json:"refresh_seconds"`
	Relay          Relay `json:"relay"`
	// Tables are every database's tables, database by database.
	Tables []TableView `json:"tables"`
}

// DatabaseView names one database of the overview.
type DatabaseView struct {
	Name  string `json:"name"`
	Label string `json:"label"`
}

// Relay names the process serving the page.
type Relay struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
}

// TableView is one table in the overview.
type TableView struct {
	// Database is the name of the table's database.
	Database string           `json:"database"`
	Table    string           `json:"table"`
	Status   ops.StatusReport `json:"status"`
	Lock     LockState        `json:"lock"`
	// Partitions are the locks of the table's partitions, in order, with relay.partitions > 1
	// (Lock, the table's own key, is then held by no one).
	Partitions []LockState  `json:"partitions,omitempty"`
	Activity   ActivityView `json:"activity"`
	Error      string       `json:"error,omitempty"`
}

// overviewCache keeps the last overview for CacheFor, or for costFactor times what it cost to
// compute when that is longer: counting a table by status reads its whole status index (0.3 s
// to 2 s for 1M rows on a shared 2-core machine), so open pages cost the database at most
// 1/costFactor of one connection's time, however many there are.
type overviewCache struct {
	mu   sync.Mutex
	at   time.Time
	ttl  time.Duration
	body []byte
}

const costFactor = 20

func (d *Dashboard) handleOverview(w http.ResponseWriter, r *http.Request) {
	body, err := d.cache.get(r.Context(), d)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body) // after the lock: a client that does not read blocks only itself
}

// get returns the cached overview, computing it when stale: one computation at a time, the
// other callers wait for and share its result.
func (c *overviewCache) get(ctx context.Context, d *Dashboard) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.body == nil || time.Since(c.at) >= c.ttl {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		b, err := json.Marshal(d.overview(ctx))
		if err != nil {
			return nil, err
		}
		c.body, c.at, c.ttl = b, time.Now(), max(d.cfg.CacheFor, costFactor*time.Since(start))
	}
	return c.body, nil
}

func (d *Dashboard) overview(ctx context.Context) Overview {
	now := time.Now()
	o := Overview{Now: now.UTC(), Admin: d.cfg.AdminToken != "", ReadLocked: d.readLocked(), RefreshSeconds: refreshSeconds,
		Relay: Relay{Host: hostname(), PID: os.Getpid()}, Tables: []TableView{}}
	labels := make([]string, len(d.sources))
	for i, s := range d.sources {
		labels[i] = s.Label
		o.Databases = append(o.Databases, DatabaseView{Name: s.Name, Label: s.Label})
		for _, t := range s.Tables {
			v := TableView{Database: s.Name, Table: t, Activity: s.activity.view(t)}
			dbNow, err := ops.DBNow(ctx, s.DB) // ages on the database's clock
			var st ops.StatusReport
			if err == nil {
				st, err = ops.Status(ctx, s.DB, t, dbNow)
			}
			if err != nil {
				v.Error = err.Error()
			}
			v.Status = st
			v.Status.ByTopic = capTopics(st.ByTopic, maxOverviewTopics)
			v.Status.Database = s.Label
			v.Lock = readLock(ctx, d.rdb, s.LockKey(t), now)
			for p := 0; p < s.Partitions && s.Partitions > 1; p++ {
				v.Partitions = append(v.Partitions, readLock(ctx, d.rdb, relay.PartitionLockKey(s.LockKey(t), p, s.Partitions), now))
			}
			o.Tables = append(o.Tables, v)
		}
	}
	o.Database = strings.Join(labels, ", ")
	return o
}

// DeadPage is the answer of GET /ui/api/dead.
type DeadPage struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	// Count is how many dead rows match the filter in all.
	Count    int64             `json:"count"`
	Messages []ops.DeadMessage `json:"messages"`
	// NextAfterID pages on (after_id); 0 when this page is the last.
	NextAfterID int64 `json:"next_after_id"`
}

// handleDead lists dead rows: database (optional with one database), table, topic, tag (exact or * patterns), reason (text),
// after and before (epoch seconds, when the rows died), after_id and limit.
func (d *Dashboard) handleDead(w http.ResponseWriter, r *http.Request) {
	if !d.canRead(w, r) {
		return
	}
	q := r.URL.Query()
	src, table, ok := d.table(w, q.Get("database"), q.Get("table"))
	if !ok {
		return
	}
	f, err := filterFrom(func(k string) string { return q.Get(k) })
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	afterID, err1 := optInt(q.Get("after_id"))
	limit, err2 := optInt(q.Get("limit"))
	if err := errors.Join(err1, err2); err != nil || limit < 0 || limit > maxListed {
		writeError(w, http.StatusBadRequest, "after_id and limit must be whole numbers, limit at most "+strconv.Itoa(maxListed))
		return
	}
	if limit == 0 {
		limit = 50
	}
	page := DeadPage{Database: src.Name, Table: table}
	if page.Count, err = ops.CountDeadQuery(r.Context(), src.DB, table, f); err == nil {
		page.Messages, err = ops.DeadSearch(r.Context(), src.DB, table, f, afterID, int(limit))
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	if n := len(page.Messages); n == int(limit) {
		page.NextAfterID = page.Messages[n-1].ID
	}
	writeJSON(w, http.StatusOK, page)
}

// handleMessage returns one dead row with its body: database (optional with one
// database), table, id.
func (d *Dashboard) handleMessage(w http.ResponseWriter, r *http.Request) {
	src, table, id, ok := d.rowRequest(w, r)
	if !ok {
		return
	}
	m, err := ops.DeadBody(r.Context(), src.DB, table, id, maxBodyChars)
	switch {
	case errors.Is(err, ops.ErrNotDead):
		writeError(w, http.StatusNotFound, "no dead message with this id (requeued, or purged?)")
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, m)
	}
}

// RequeueRequest is the body of POST /ui/api/requeue: either MsgIDs, or a Filter with
// Confirm set to the number of rows it matches (the answer 409 tells that number first).
// Database names the table's database; it may be left out when there is one.
type RequeueRequest struct {
	Database string            `json:"database"`
	Table    string            `json:"table"`
	MsgIDs   []string          `json:"msg_ids"`
	Filter   map[string]string `json:"filter"`
	Confirm  *int64            `json:"confirm"`
}

// ConfirmNeeded is the answer 409 of a requeue by filter whose Confirm is not the count of
// rows it matches now.
type ConfirmNeeded struct {
	Error string `json:"error"`
	Count int64  `json:"count"`
}

func (d *Dashboard) handleRequeue(w http.ResponseWriter, r *http.Request) {
	if !d.authorize(w, r) {
		return
	}
	var req RequeueRequest
	src, table, ok := d.decodeTableRequest(w, r, &req, func() (string, string) { return req.Database, req.Table })
	if !ok {
		return
	}
	var q ops.DeadQuery
	switch {
	case len(req.MsgIDs) > 0 && req.Filter != nil:
		writeError(w, http.StatusBadRequest, "give msg_ids or filter, not both")
		return
	case len(req.MsgIDs) > maxSelected:
		writeError(w, http.StatusBadRequest, "at most "+strconv.Itoa(maxSelected)+" msg_ids: requeue more by filter")
		return
	case len(req.MsgIDs) > 0:
		q.MsgIDs = req.MsgIDs
	case req.Filter != nil:
		var err error
		if q, err = filterFrom(func(k string) string { return req.Filter[k] }); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		q.All = true // an empty filter is every dead row, confirmed by its count
		n, err := ops.CountDeadQuery(r.Context(), src.DB, table, q)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		if req.Confirm == nil || *req.Confirm != n {
			writeJSON(w, http.StatusConflict, ConfirmNeeded{Error: "confirm the number of rows to requeue", Count: n})
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "give msg_ids or filter")
		return
	}
	res, err := ops.RequeueQuery(r.Context(), src.DB, table, q)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	d.log.Info().Str("database_name", src.Name).Str("database", src.Label).Str("table", table).Int("requeued", len(res.Requeued)).Int("skipped", len(res.Skipped)).
		Bool("by_filter", req.Filter != nil).Str("remote", r.RemoteAddr).Msg("dashboard: requeue")
	writeJSON(w, http.StatusOK, res)
}

// filterFrom reads the dead-row filter fields: topic, tag, reason, after, before.
func filterFrom(get func(string) string) (ops.DeadQuery, error) {
	q := ops.DeadQuery{Reason: strings.TrimSpace(get("reason"))}
	q.Topic, q.Tag = strings.TrimSpace(get("topic")), strings.TrimSpace(get("tag"))
	for _, b := range []struct {
		key string
		t   *time.Time
	}{{"after", &q.DiedAfter}, {"before", &q.DiedBefore}} {
		s, err := optInt(get(b.key))
		if err != nil || s < 0 {
			return q, errors.New(b.key + " must be a time in epoch seconds")
		}
		if s > 0 {
			*b.t = time.Unix(s, 0)
		}
	}
	return q, nil
}

func optInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}

// table returns the database named database (which may be "" when there is only one) and
// its table name, else answers 404.
func (d *Dashboard) table(w http.ResponseWriter, database, name string) (*source, string, bool) {
	var src *source
	for _, s := range d.sources {
		if s.Name == database || (database == "" && len(d.sources) == 1) {
			src = s
		}
	}
	if src == nil {
		writeError(w, http.StatusNotFound, "unknown database: give one of the relayed databases by name")
		return nil, "", false
	}
	if !src.tables[name] {
		writeError(w, http.StatusNotFound, "unknown table: give one of the relayed tables")
		return nil, "", false
	}
	return src, name, true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
