// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// ReplayConfig lets the dashboard replay sent messages (POST /ui/api/replay) through the
// relay's publisher and routes, as `outbox-relay replay --execute` does.
type ReplayConfig struct {
	// Publisher and Router are the relay's. Required.
	Publisher relay.Publisher
	Router    relay.Router
	// UnroutedDead and MaxBodyBytes are relay.unrouted: dead and relay.max_body_bytes.
	UnroutedDead bool
	MaxBodyBytes int
	// Rate is the most messages a second of a dashboard replay (replay.DefaultRate when 0);
	// a request may ask for less, never more.
	Rate float64
	// Metrics counts the copies sent (source "dashboard"). Defaults to none.
	Metrics *replay.Metrics
}

// maxReplayRuns is the dashboard replays remembered for the page and the timelines.
const maxReplayRuns = 50

// ReplayRequest is the body of POST /ui/api/replay: msg_ids (at most 1000) or a filter, and
// for a filter the count confirmed (the dry run's, answered with 409 until it is given).
type ReplayRequest struct {
	Database string        `json:"database"`
	Table    string        `json:"table"`
	MsgIDs   []string      `json:"msg_ids"`
	Filter   *ReplayFilter `json:"filter"`
	Confirm  *int64        `json:"confirm"`
	// Rate asks for a slower replay than the configured rate (messages a second).
	Rate float64 `json:"rate"`
}

// ReplayFilter is a replay's selection by filter; times are epoch seconds, 0 open.
type ReplayFilter struct {
	Topic         string `json:"topic"`
	Tag           string `json:"tag"`
	Key           string `json:"key"`
	ShardingKey   string `json:"sharding_key"`
	Since         int64  `json:"since"`
	Until         int64  `json:"until"`
	FromID        int64  `json:"from_id"`
	ToID          int64  `json:"to_id"`
	IncludeHanded bool   `json:"include_handed"`
}

// ReplayRun is a dashboard replay, running or ended.
type ReplayRun struct {
	RunID    string     `json:"run_id"`
	Database string     `json:"database"`
	Table    string     `json:"table"`
	Counted  int64      `json:"counted"`
	Sent     int64      `json:"sent"`
	Skipped  int64      `json:"skipped"`
	LastID   int64      `json:"last_id"`
	State    string     `json:"state"` // running, done, failed
	Error    string     `json:"error,omitempty"`
	Started  time.Time  `json:"started"`
	Ended    *time.Time `json:"ended,omitempty"`
	filter   ops.ReplayFilter
}

// replayLog holds the dashboard's replays: one runs at a time, the last maxReplayRuns are kept.
type replayLog struct {
	mu      sync.Mutex
	runs    []*ReplayRun
	running bool
	ctx     context.Context
	cancel  context.CancelFunc
}

func (d *Dashboard) routeReplay() {
	d.replays.ctx, d.replays.cancel = context.WithCancel(context.Background())
	d.mux.HandleFunc("POST /ui/api/replay", d.handleReplay)
	d.mux.HandleFunc("GET /ui/api/replay", d.handleReplays)
}

// handleReplays lists the dashboard's replays, newest first.
func (d *Dashboard) handleReplays(w http.ResponseWriter, r *http.Request) {
	if !d.canRead(w, r) {
		return
	}
	d.replays.mu.Lock()
	out := make([]ReplayRun, 0, len(d.replays.runs))
	for i := len(d.replays.runs) - 1; i >= 0; i-- {
		out = append(out, *d.replays.runs[i])
	}
	d.replays.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// handleReplay counts what a request selects and, once that count is confirmed (msg_ids
// need none past the dry run: the page shows it), starts the replay in the background.
func (d *Dashboard) handleReplay(w http.ResponseWriter, r *http.Request) {
	if !d.authorize(w, r) {
		return
	}
	if d.cfg.Replay == nil {
		writeError(w, http.StatusForbidden, "this process does not publish: replay with `outbox-relay replay`")
		return
	}
	var req ReplayRequest
	src, table, ok := d.decodeTableRequest(w, r, &req, func() (string, string) { return req.Database, req.Table })
	if !ok {
		return
	}
	f, err := req.filter()
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cfg := d.replayConfig(src, table, f, req.Rate)
	n, through, err := replay.Count(r.Context(), cfg)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	cfg.Filter.ToID = through // the run sends what was counted, not rows sent since
	if n == 0 || req.Confirm == nil || *req.Confirm != n {
		writeJSON(w, http.StatusConflict, ConfirmNeeded{Error: "confirm the number of sent messages to replay (dry run)", Count: n})
		return
	}
	run, ok := d.replays.start(&ReplayRun{RunID: cfg.RunID, Database: src.Name, Table: table, Counted: n, State: "running",
		Started: time.Now().UTC(), filter: f})
	if !ok {
		writeError(w, http.StatusConflict, "a replay is running: wait for it to end")
		return
	}
	d.log.Info().Str("run_id", cfg.RunID).Str("database_name", src.Name).Str("database", src.Label).Str("table", table).
		Int64("count", n).Bool("by_filter", req.Filter != nil).Str("remote", r.RemoteAddr).Msg("dashboard: replay started")
	go d.runReplay(cfg, run)
	writeJSON(w, http.StatusAccepted, *run)
}

// decodeTableRequest reads a state change's JSON body (at most 1 MiB, no unknown field) into
// req and finds the table it names (named reads it once decoded); it answers a refusal and
// returns false otherwise.
func (d *Dashboard) decodeTableRequest(w http.ResponseWriter, r *http.Request, req any, named func() (string, string)) (*source, string, bool) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		writeError(w, http.StatusBadRequest, "bad request body: "+err.Error())
		return nil, "", false
	}
	database, table := named()
	return d.table(w, database, table)
}

// filter reads the request's selection.
func (req ReplayRequest) filter() (ops.ReplayFilter, error) {
	var f ops.ReplayFilter
	switch {
	case len(req.MsgIDs) > 0 && req.Filter != nil:
		return f, fmt.Errorf("give msg_ids or filter, not both")
	case len(req.MsgIDs) > maxSelected:
		return f, fmt.Errorf("at most %d msg_ids: replay more by filter", maxSelected)
	case len(req.MsgIDs) > 0:
		f.MsgIDs = req.MsgIDs
	case req.Filter != nil:
		rf := req.Filter
		f = ops.ReplayFilter{Topic: strings.TrimSpace(rf.Topic), Tag: strings.TrimSpace(rf.Tag), Key: strings.TrimSpace(rf.Key),
			ShardingKey: strings.TrimSpace(rf.ShardingKey), FromID: rf.FromID, ToID: rf.ToID, IncludeHanded: rf.IncludeHanded}
		if rf.Since < 0 || rf.Until < 0 {
			return f, fmt.Errorf("since and until are times in epoch seconds")
		}
		if rf.Since > 0 {
			f.SentFrom = time.Unix(rf.Since, 0)
		}
		if rf.Until > 0 {
			f.SentTo = time.Unix(rf.Until, 0)
		}
	default:
		return f, fmt.Errorf("give msg_ids or filter")
	}
	return f, f.Check()
}

// replayConfig is the replay of f in table at the configured rate, or the lower one asked.
func (d *Dashboard) replayConfig(src *source, table string, f ops.ReplayFilter, rate float64) replay.Config {
	rc := d.cfg.Replay
	limit := rc.Rate
	if limit <= 0 {
		limit = replay.DefaultRate
	}
	if rate > 0 {
		limit = min(limit, rate)
	}
	return replay.Config{DB: src.DB, Table: table, Filter: f, Publisher: rc.Publisher, Router: rc.Router, UnroutedDead: rc.UnroutedDead,
		MaxBodyBytes: rc.MaxBodyBytes, Rate: limit, Metrics: rc.Metrics, Source: "dashboard", RunID: replay.NewRunID()}
}

// start records run as running, unless another one is.
func (l *replayLog) start(run *ReplayRun) (*ReplayRun, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return nil, false
	}
	l.running = true
	l.runs = append(l.runs, run)
	if len(l.runs) > maxReplayRuns {
		l.runs = slices.Delete(l.runs, 0, len(l.runs)-maxReplayRuns)
	}
	return run, true
}

// runReplay runs one replay to its end (or the dashboard's Stop) and records the outcome.
func (d *Dashboard) runReplay(cfg replay.Config, run *ReplayRun) {
	res, err := replay.Run(d.replays.ctx, cfg)
	l := &d.replays
	l.mu.Lock()
	end := time.Now().UTC()
	run.Sent, run.Skipped, run.LastID, run.Ended, run.State = res.Sent, res.Skipped, res.LastID, &end, "done"
	if err != nil {
		run.State, run.Error = "failed", err.Error()
	}
	l.running = false
	l.mu.Unlock()
	d.log.Info().Str("run_id", run.RunID).Str("table", run.Table).Int64("sent", res.Sent).Int64("skipped", res.Skipped).
		Int64("last_id", res.LastID).Err(err).Msg("dashboard: replay ended")
}

// stop cancels a running replay (the dashboard's Stop).
func (l *replayLog) stop() {
	if l.cancel != nil {
		l.cancel()
	}
}

// replayEvents are the timeline's steps for the dashboard replays of this process that
// selected row m of table (the log is in memory: replays by the command line, or before the
// process started, are in the logs only).
func (d *Dashboard) replayEvents(database, table string, m ops.Found) []Event {
	d.replays.mu.Lock()
	defer d.replays.mu.Unlock()
	var ev []Event
	for _, run := range d.replays.runs {
		if run.Database != database || run.Table != table || !selects(run.filter, m) {
			continue
		}
		started := run.Started
		detail := "re-published by dashboard replay " + run.RunID + " (" + outbox.ReplayProperty + " marks the copy; same msg_id and keys)"
		switch {
		case run.State == "running":
			detail += ": running, " + strconv.FormatInt(run.Sent, 10) + " of " + strconv.FormatInt(run.Counted, 10) + " sent"
		case run.State == "failed" && m.ID > run.LastID:
			detail += ": stopped before this message: " + run.Error
		}
		ev = append(ev, Event{At: &started, Step: "replayed", Kind: "info", Detail: detail})
	}
	return ev
}

// selects reports whether f chooses row m: the conditions of ops.ReplayFilter, in Go.
func selects(f ops.ReplayFilter, m ops.Found) bool {
	st := outbox.Status(m.Status)
	at := m.SentTime
	if st == outbox.StatusHanded {
		at = m.NextRetryTime
	}
	keys := strings.Fields(m.MsgKeys)
	return (st == outbox.StatusSent || (st == outbox.StatusHanded && f.IncludeHanded)) &&
		(f.SentFrom.IsZero() || at >= f.SentFrom.UnixMilli()) && (f.SentTo.IsZero() || at < f.SentTo.UnixMilli()) &&
		(f.Topic == "" || f.Topic == m.Topic) && (f.Tag == "" || f.Tag == m.Tag) &&
		(f.Key == "" || slices.Contains(keys, f.Key) || (len(keys) == 0 && f.Key == m.MsgID)) &&
		(f.ShardingKey == "" || f.ShardingKey == m.ShardingKey) &&
		(f.FromID == 0 || m.ID >= f.FromID) && (f.ToID == 0 || m.ID <= f.ToID) &&
		(f.MsgIDs == nil || slices.Contains(f.MsgIDs, m.MsgID))
}
