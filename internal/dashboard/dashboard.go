// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

//go:embed web
var webFiles embed.FS

// Source is one database the dashboard shows.
type Source struct {
	// Name identifies the database in the page and in the API's database parameter
	// (config.Database.Name). Required, unique.
	Name string
	// Label names the database as server/schema, no credentials (config.Database.Label).
	// Defaults to empty.
	Label string
	// DB reads and requeues the database's outbox tables. Required.
	DB *sql.DB
	// Tables are the outbox tables shown. Required.
	Tables []string
	// LockKey returns the Redis key of a table's leader lock (config.Config.LockKeyIn).
	// Required.
	LockKey func(table string) string
	// Partitions is relay.partitions: above 1 the page shows each partition's lock, whose key
	// is relay.PartitionLockKey of the table's. Defaults to 0: one lock per table.
	Partitions int
	// Activity returns this process's counts of a table's last hour, per minute
	// (relay.Metrics.Activity): the page's chart. Defaults to none: the chart is empty.
	Activity func(table string) []relay.MinuteActivity
}

// Config configures a Dashboard.
type Config struct {
	// Databases are the databases shown, in order. Required.
	Databases []Source
	// AdminToken allows requeue, and reading message bodies, to requests that carry it as a
	// bearer token; empty keeps the dashboard read-only. Defaults to empty.
	AdminToken string
	// ReadToken allows reading message bodies (the dead list and a dead message) to requests
	// that carry it as a bearer token. Defaults to empty: only AdminToken reads, or anyone
	// when OpenReads is set.
	ReadToken string
	// OpenReads lets every request read message bodies without a token; set it when the
	// server listens on loopback only, where only local processes reach it. Defaults to false.
	OpenReads bool
	// Hosts are the host names (Host header, without port) the dashboard answers to, besides
	// localhost and IP addresses; any other name is refused, so that a web page cannot reach
	// it through DNS rebinding. Defaults to none.
	Hosts []string
	// SampleEvery is the width of an activity bucket, and how often the activity is
	// sampled. Defaults to 15 seconds.
	SampleEvery time.Duration
	// Window is the span of activity kept and shown. Defaults to 1 hour.
	Window time.Duration
	// CacheFor is how long an overview is reused at least, so that many open pages cost the
	// database no more than one; an overview that took long to compute is reused for 20
	// times as long. Defaults to 2 seconds.
	CacheFor time.Duration
	// Logger receives the requeue audit lines and sampling errors. Defaults to no logging.
	Logger *zerolog.Logger
	// Brokers returns the broker panel (brokers.go). Defaults to none: the page says the
	// process does not know.
	Brokers func(ctx context.Context) BrokerPanel
	// Secrets are removed from every text of the broker panel (rocketmq.secret_key, say).
	// Defaults to none.
	Secrets []string
	// Audit returns each table's broker audit as this process runs it (audit.go). Defaults
	// to none: the page says the process does not know.
	Audit func() []TableAudit
	// Replay lets the admin token replay sent messages (replay.go). Defaults to none: the
	// dashboard refuses replays.
	Replay *ReplayConfig
}

func (c *Config) setDefaults() {
	if c.SampleEvery == 0 {
		c.SampleEvery = 15 * time.Second
	}
	if c.Window == 0 {
		c.Window = time.Hour
	}
	if c.CacheFor == 0 {
		c.CacheFor = 2 * time.Second
	}
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
}

func (c Config) validate() error {
	if len(c.Databases) == 0 {
		return errors.New("dashboard: Databases is empty")
	}
	names := map[string]bool{}
	for i, src := range c.Databases {
		switch {
		case src.Name == "" || names[src.Name]:
			return fmt.Errorf("dashboard: Databases[%d]: Name is empty or repeated: %q", i, src.Name)
		case src.DB == nil || src.LockKey == nil:
			return fmt.Errorf("dashboard: database %s: DB and LockKey are required", src.Name)
		case len(src.Tables) == 0:
			return fmt.Errorf("dashboard: database %s: Tables is empty", src.Name)
		}
		names[src.Name] = true
		for _, t := range src.Tables {
			if err := schema.ValidateIdent(t); err != nil {
				return fmt.Errorf("dashboard: database %s: table: %w", src.Name, err)
			}
		}
	}
	if c.SampleEvery < time.Second || c.SampleEvery%time.Second != 0 {
		return fmt.Errorf("dashboard: SampleEvery must be whole seconds, at least 1s, got %s", c.SampleEvery)
	}
	if c.Window < c.SampleEvery {
		return fmt.Errorf("dashboard: Window (%s) is shorter than SampleEvery (%s)", c.Window, c.SampleEvery)
	}
	return nil
}

// source is a Source being served, with its activity.
type source struct {
	Source
	tables   map[string]bool
	activity *activityRing
}

// Dashboard serves the page and its API under /ui/ (ServeHTTP) and samples the tables'
// activity in the background between Start and Stop.
type Dashboard struct {
	rdb     redis.Cmdable
	cfg     Config
	log     zerolog.Logger
	sources []*source
	mux     *http.ServeMux

	cache   overviewCache
	brokers brokerCache
	replays replayLog

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Dashboard of the databases of cfg, reading their leader locks in rdb.
func New(rdb redis.Cmdable, cfg Config) (*Dashboard, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Dashboard{rdb: rdb, cfg: cfg, log: *cfg.Logger}
	for _, src := range cfg.Databases {
		s := &source{Source: src, tables: map[string]bool{}}
		for _, t := range src.Tables {
			s.tables[t] = true
		}
		log := d.log
		if len(cfg.Databases) > 1 {
			log = log.With().Str("database_name", src.Name).Logger()
		}
		s.activity = newActivityRing(src.DB, src.Tables, cfg.SampleEvery, cfg.Window, log)
		d.sources = append(d.sources, s)
	}
	static, err := fs.Sub(webFiles, "web")
	if err != nil {
		return nil, err
	}
	d.mux = http.NewServeMux()
	d.mux.Handle("GET /ui/", http.StripPrefix("/ui/", http.FileServerFS(static)))
	d.mux.HandleFunc("GET /ui/api/overview", d.handleOverview)
	d.mux.HandleFunc("GET /ui/api/dead", d.handleDead)
	d.mux.HandleFunc("GET /ui/api/message", d.handleMessage)
	d.mux.HandleFunc("POST /ui/api/requeue", d.handleRequeue)
	d.mux.HandleFunc("GET /ui/api/requeue", d.handleRequeue) // answers 405, not the file server's 404
	d.routeExplorer()
	d.routeReplay()
	return d, nil
}

// ServeHTTP serves the dashboard; mount it at /ui/.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// The page loads only its own script and style and talks only to its own API; nothing
	// may frame it, and no data is ever turned into markup (the script uses text nodes).
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"+
		" connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if !d.hostOK(r.Host) {
		writeError(w, http.StatusMisdirectedRequest, "host "+strconv.Quote(r.Host)+" is not served here: add it to http.hosts")
		return
	}
	d.mux.ServeHTTP(w, r)
}

// Start samples the tables' activity, each database's on its own, in the background until Stop or ctx ends.
func (d *Dashboard) Start(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cancel != nil {
		return errors.New("dashboard: already started")
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	go func() {
		defer close(d.done)
		var wg sync.WaitGroup
		for _, s := range d.sources {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.activity.run(ctx)
			}()
		}
		wg.Wait()
	}()
	return nil
}

// Stop ends the sampling (and a running replay) and waits for the sampling; it is safe to call twice, or without Start.
func (d *Dashboard) Stop() {
	d.replays.stop()
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}
