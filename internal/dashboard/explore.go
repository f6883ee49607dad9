// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The message explorer: GET /ui/api/search finds rows of any status, GET /ui/api/row shows
// one with its timeline and body. Both read message data, so both need the read permission
// (canRead), as the dead list does.

// FoundRow is a row of a search, with its database and table.
type FoundRow struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	ops.Found
	StatusName string `json:"status_name"`
}

// SearchAnswer is the answer of GET /ui/api/search.
type SearchAnswer struct {
	Messages []FoundRow `json:"messages"`
	// Plan says how the rows were found ("msg_id", "sharding_key", "window"); Before
	// continues a one-table search (0: it is over); Scanned describes what a window search
	// read this call.
	Plan    string `json:"plan"`
	Before  int64  `json:"before"`
	Scanned string `json:"scanned,omitempty"`
	// More names the tables of an every-table search that hold more rows than shown:
	// search them one by one to page.
	More []string `json:"more,omitempty"`
}

// handleSearch searches one table (database, table) or, with table empty, every table of
// every database (no paging then): msg_id, key, sharding_key, topic, tag, status (0-4),
// from and to (epoch seconds, bounding create_time; required unless msg_id or sharding_key
// is given), before (to page) and limit (at most ops.MaxSearchLimit).
func (d *Dashboard) handleSearch(w http.ResponseWriter, r *http.Request) {
	if !d.canRead(w, r) {
		return
	}
	q := r.URL.Query()
	s, before, limit, err := searchFrom(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	type target struct {
		src   *source
		table string
	}
	var targets []target
	if q.Get("table") == "" {
		if before != 0 {
			writeError(w, http.StatusBadRequest, "before pages a one-table search: give the table")
			return
		}
		for _, src := range d.sources {
			for _, t := range src.Tables {
				targets = append(targets, target{src, t})
			}
		}
	} else {
		src, table, ok := d.table(w, q.Get("database"), q.Get("table"))
		if !ok {
			return
		}
		targets = append(targets, target{src, table})
	}
	ans := SearchAnswer{Messages: []FoundRow{}}
	for _, tg := range targets {
		page, err := ops.SearchMessages(r.Context(), tg.src.DB, tg.table, s, before, limit)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		for _, m := range page.Messages {
			ans.Messages = append(ans.Messages, FoundRow{Database: tg.src.Name, Table: tg.table, Found: m, StatusName: outbox.Status(m.Status).String()})
		}
		ans.Plan = page.Plan
		if page.Before != 0 {
			ans.More = append(ans.More, tg.src.Name+"/"+tg.table)
		}
		if len(targets) == 1 {
			ans.Before = page.Before
			if page.Plan == "window" && page.ScannedTo > 0 {
				ans.Scanned = "rows " + strconv.FormatInt(page.ScannedFrom, 10) + " to " + strconv.FormatInt(page.ScannedTo, 10) +
					" of the window's " + strconv.FormatInt(page.FirstID, 10) + " onwards"
			}
		}
	}
	writeJSON(w, http.StatusOK, ans)
}

// searchFrom reads a search's parameters.
func searchFrom(q url.Values) (ops.Search, int64, int, error) {
	s := ops.Search{Status: -1}
	s.MsgID, s.Key, s.ShardingKey = strings.TrimSpace(q.Get("msg_id")), strings.TrimSpace(q.Get("key")), strings.TrimSpace(q.Get("sharding_key"))
	s.Topic, s.Tag = strings.TrimSpace(q.Get("topic")), strings.TrimSpace(q.Get("tag"))
	if st := q.Get("status"); st != "" {
		n, err := strconv.Atoi(st)
		if err != nil || n < 0 || n > int(outbox.StatusHanded) {
			return s, 0, 0, errors.New("status must be 0 (pending) to 4 (handed)")
		}
		s.Status = n
	}
	from, err1 := optInt(q.Get("from"))
	to, err2 := optInt(q.Get("to"))
	before, err3 := optInt(q.Get("before"))
	limit, err4 := optInt(q.Get("limit"))
	if errors.Join(err1, err2, err3, err4) != nil || from < 0 || to < 0 || before < 0 || limit < 0 || limit > ops.MaxSearchLimit {
		return s, 0, 0, errors.New("from, to and before must be whole numbers (from and to in epoch seconds), limit at most " + strconv.Itoa(ops.MaxSearchLimit))
	}
	if from > 0 {
		s.From = time.Unix(from, 0)
	}
	if to > 0 {
		s.To = time.Unix(to, 0)
	}
	for _, v := range []string{s.MsgID, s.Key, s.ShardingKey, s.Topic, s.Tag} {
		if len(v) > 512 {
			return s, 0, 0, errors.New("a search field is longer than any column it searches")
		}
	}
	if limit == 0 {
		limit = 50
	}
	return s, before, int(limit), nil
}

// RowAnswer is the answer of GET /ui/api/row: one row of any status, its timeline and body.
type RowAnswer struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	ops.MessageDetail
	StatusName string  `json:"status_name"`
	Timeline   []Event `json:"timeline"`
	// StoredAt is where the broker stored the message, from the table's stored-position journal.
	StoredAt ops.StoredAt `json:"stored_at"`
}

// handleRow returns one row of any status: database (optional with one database), table, id.
func (d *Dashboard) handleRow(w http.ResponseWriter, r *http.Request) {
	src, table, id, ok := d.rowRequest(w, r)
	if !ok {
		return
	}
	m, err := ops.MessageBody(r.Context(), src.DB, table, id, maxBodyChars)
	var pos ops.StoredAt
	if err == nil {
		pos, err = ops.MessageStoredAt(r.Context(), src.DB, table, id)
	}
	switch {
	case errors.Is(err, ops.ErrNoMessage):
		writeError(w, http.StatusNotFound, "no message with this id (purged?)")
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		writeJSON(w, http.StatusOK, RowAnswer{Database: src.Name, Table: table, MessageDetail: m, StoredAt: pos,
			StatusName: outbox.Status(m.Status).String(), Timeline: append(TimelineStored(m.Found, pos), d.replayEvents(src.Name, table, m.Found)...)})
	}
}

// rowRequest reads the row a request names (database, optional with one database; table;
// id) after checking the read permission; it answers the refusal and returns false otherwise.
func (d *Dashboard) rowRequest(w http.ResponseWriter, r *http.Request) (*source, string, int64, bool) {
	if !d.canRead(w, r) {
		return nil, "", 0, false
	}
	src, table, ok := d.table(w, r.URL.Query().Get("database"), r.URL.Query().Get("table"))
	if !ok {
		return nil, "", 0, false
	}
	id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "id must be a row id")
		return nil, "", 0, false
	}
	return src, table, id, true
}
