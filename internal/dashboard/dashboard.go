package dashboard

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/schema"
)

//go:embed web
var webFiles embed.FS

// Config configures a Dashboard.
type Config struct {
	// Tables are the outbox tables shown. Required.
	Tables []string
	// LockKey returns the Redis key of a table's leader lock (config.Config.LockKey). Required.
	LockKey func(table string) string
	// Database names the database shown (config.Config.DatabaseLabel: server/schema, no
	// credentials). Defaults to empty.
	Database string
	// AdminToken allows requeue to requests that carry it as a bearer token; empty keeps the
	// dashboard read-only. Defaults to empty.
	AdminToken string
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
	if len(c.Tables) == 0 {
		return errors.New("dashboard: Tables is empty")
	}
	for _, t := range c.Tables {
		if err := schema.ValidateIdent(t); err != nil {
			return fmt.Errorf("dashboard: table: %w", err)
		}
	}
	if c.LockKey == nil {
		return errors.New("dashboard: LockKey is nil")
	}
	if c.SampleEvery < time.Second || c.SampleEvery%time.Second != 0 {
		return fmt.Errorf("dashboard: SampleEvery must be whole seconds, at least 1s, got %s", c.SampleEvery)
	}
	if c.Window < c.SampleEvery {
		return fmt.Errorf("dashboard: Window (%s) is shorter than SampleEvery (%s)", c.Window, c.SampleEvery)
	}
	return nil
}

// Dashboard serves the page and its API under /ui/ (ServeHTTP) and samples the tables'
// activity in the background between Start and Stop.
type Dashboard struct {
	db       *sql.DB
	rdb      redis.Cmdable
	cfg      Config
	log      zerolog.Logger
	tables   map[string]bool
	activity *activityRing
	mux      *http.ServeMux

	cache overviewCache

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Dashboard reading db (the outbox tables) and rdb (the leader locks).
func New(db *sql.DB, rdb redis.Cmdable, cfg Config) (*Dashboard, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &Dashboard{db: db, rdb: rdb, cfg: cfg, log: *cfg.Logger, tables: map[string]bool{}}
	for _, t := range cfg.Tables {
		d.tables[t] = true
	}
	d.activity = newActivityRing(db, cfg.Tables, cfg.SampleEvery, cfg.Window, d.log)
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
	d.mux.ServeHTTP(w, r)
}

// Start samples the tables' activity in the background until Stop or ctx ends.
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
		d.activity.run(ctx)
	}()
	return nil
}

// Stop ends the sampling and waits for it; it is safe to call twice, or without Start.
func (d *Dashboard) Stop() {
	d.mu.Lock()
	cancel, done := d.cancel, d.done
	d.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}
