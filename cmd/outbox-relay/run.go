package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/dashboard"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/redisconn"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

func (a *app) newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the relay (the default command)",
		Long: `Run the relay: hold the leader lock for each configured table, publish due rows to
RocketMQ, retry failures with backoff, serve /metrics, /healthz, /readyz and the dashboard
(/ui/) on http.addr, and purge old sent rows when relay.purge_retention is set. SIGINT or
SIGTERM stops it cleanly: the in-flight batch finishes or is left due, the lock is
released, exit 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.log.Info().Strs("tables", a.cfg.Tables()).Strs("nameservers", a.cfg.RocketMQ.NameServers).
				Str("redis", redisconn.Describe(a.cfg)).Str("http", a.cfg.HTTP.Addr).Str("version", version).Msg("starting")
			return runRelay(cmd.Context(), a.cfg, a.log)
		},
	}
}

// runRelay runs the delivery engine until ctx is cancelled (SIGINT/SIGTERM), then shuts it
// down within cfg.Relay.ShutdownTimeout and returns nil; any other return is a runtime error
// (exit 1). cfg is validated; log is the process logger.
func runRelay(ctx context.Context, cfg config.Config, log zerolog.Logger) error {
	useClientLogger(log)
	db, err := openMySQL(ctx, cfg.MySQL.DSN)
	if err != nil {
		return err
	}
	defer db.Close()
	for _, table := range cfg.Tables() {
		problems, err := schema.CheckPartitioned(ctx, db, table, cfg.Relay.Partitions)
		if err != nil {
			return err
		}
		if len(problems) > 0 {
			return fmt.Errorf("table %s is not ready (run `outbox-relay migrate`): %v", table, problems)
		}
	}
	rconn := redisconn.Open(cfg, redisconn.Options{})
	defer rconn.Close()
	rdb := rconn.Client
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = rconn.Ping(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to Redis: %w", err)
	}
	pub, err := relay.NewRocketMQPublisher(relay.RocketMQConfig{
		NameServers: cfg.RocketMQ.NameServers, Group: cfg.RocketMQ.Group, SendTimeout: cfg.RocketMQ.SendTimeout,
		AccessKey: cfg.RocketMQ.AccessKey, SecretKey: cfg.RocketMQ.SecretKey,
	})
	if err != nil {
		return err
	}
	defer pub.Close()
	router, err := routerFrom(cfg.Routes)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := relay.NewMetricsWith(reg, relay.MetricsOptions{Routes: routeRules(cfg.Routes)})
	v, c, _ := buildInfo()
	metrics.SetBuildInfo(v, c)
	tp, stopTracing, err := setupTracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	var groups []*relay.Group
	var relays []*relay.Relay
	for _, table := range cfg.Tables() {
		rcfg := relay.Config{
			Table: table, BatchSize: cfg.Relay.BatchSize, Concurrency: cfg.Relay.Concurrency,
			PollInterval: cfg.Relay.PollInterval, DisableBatchSend: !cfg.Relay.BatchSend,
			MaxBodyBytes: cfg.Relay.MaxBodyBytes, Backoff: cfg.Backoff, Router: router,
			Database: cfg.DatabaseLabel(),
			LockKey:  cfg.LockKey(table), LockClients: rconn.Redlock, LockTTL: cfg.Lock.TTL, ShutdownTimeout: cfg.Relay.ShutdownTimeout,
			DisableNudge: !cfg.Relay.Nudge, Logger: &log, Metrics: metrics, TracerProvider: tp,
			Partitions: cfg.Relay.Partitions,
		}
		if cfg.Relay.Unrouted == config.UnroutedDead {
			rcfg.Unrouted = relay.UnroutedDead
		}
		g, err := relay.NewGroup(db, rdb, pub, rcfg)
		if err != nil {
			return err
		}
		groups = append(groups, g)
		relays = append(relays, g.Relays()...)
	}

	ui, err := dashboard.New(db, rconn.LockReader(), dashboard.Config{Tables: cfg.Tables(), LockKey: cfg.LockKey,
		Database: cfg.DatabaseLabel(), AdminToken: cfg.HTTP.AdminToken, Logger: &log})
	if err != nil {
		return err
	}
	if err := ui.Start(ctx); err != nil {
		return err
	}
	defer ui.Stop()
	srv, err := serveHTTP(cfg.HTTP.Addr, reg, db, rdb, relays, ui, log)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := g.Run(ctx); err != nil {
				log.Error().Err(err).Msg("relay stopped")
			}
		}()
	}
	if cfg.Relay.PurgeRetention > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = ops.PurgeLoop(ctx, db, cfg.Tables(), ops.PurgeOptions{OlderThan: cfg.Relay.PurgeRetention}, cfg.Relay.PurgeInterval, log)
		}()
	}
	wg.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	log.Info().Msg("stopped")
	return nil
}

// openMySQL opens and pings the database, with interpolateParams on unless the DSN says
// otherwise: it saves a round trip per statement.
func openMySQL(ctx context.Context, dsn string) (*sql.DB, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql.dsn: %w", err)
	}
	if !strings.Contains(dsn, "interpolateParams=") {
		mc.InterpolateParams = true
	}
	// Every statement of the relay has a context deadline; the driver's own timeouts are the
	// backstop for a connection that stops answering (a black-holed path, a hung server).
	if mc.Timeout == 0 {
		mc.Timeout = 5 * time.Second
	}
	if mc.ReadTimeout == 0 {
		mc.ReadTimeout = 30 * time.Second
	}
	if mc.WriteTimeout == 0 {
		mc.WriteTimeout = 30 * time.Second
	}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	db := sql.OpenDB(readCommitted{conn})
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to MySQL (%s): %w", config.RedactDSN(dsn), err)
	}
	return db, nil
}

// readCommitted is a connector whose connections run in READ COMMITTED: the relay's and the
// operator commands' statements then take no gap locks, whatever the server's default
// (REPEATABLE READ), so they cannot block the application's INSERTs (docs/decisions.md).
type readCommitted struct{ driver.Connector }

// Connect opens a connection and sets its isolation level.
func (c readCommitted) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		return conn, nil
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("set the session's isolation level: %w", err)
	}
	return conn, nil
}

func routerFrom(routes []config.Route) (relay.Router, error) {
	if len(routes) == 0 {
		return nil, nil // relay.DefaultRouter: every message routed with the defaults
	}
	router, err := relay.NewPatternRouter(routeRules(routes)...)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	return router, nil
}

func routeRules(routes []config.Route) []relay.PatternRule {
	rules := make([]relay.PatternRule, len(routes))
	for i, r := range routes {
		rules[i] = relay.PatternRule{Topic: r.Topic, Tag: r.Tag, Route: relay.Route{
			Group: r.Group, SendTimeout: r.SendTimeout, Ordered: r.Ordered, DelayLevel: r.DelayLevel,
		}}
	}
	return rules
}

// serveHTTP serves /metrics, /healthz, /readyz and the dashboard ui (under /ui/) on addr.
// /healthz fails when a leading relay has heard nothing from the database for its stall
// timeout (it is about to give its lock up); /readyz fails when MySQL or Redis does not
// answer, and says which tables this process leads and which it waits for.
func serveHTTP(addr string, reg *prometheus.Registry, db *sql.DB, rdb redis.UniversalClient, relays []*relay.Relay, ui http.Handler, log zerolog.Logger) (*http.Server, error) {
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		for _, r := range relays {
			if h := r.Health(); h.Stalled {
				http.Error(w, fmt.Sprintf("stalled: no answer from the database for %.1fs", h.SinceProgress.Seconds()), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := db.PingContext(ctx); err != nil {
			http.Error(w, "mysql: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := rdb.Ping(ctx).Err(); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		for _, rl := range relays {
			h := rl.Health()
			switch {
			case h.Leader:
				fmt.Fprintf(w, "%s: leader\n", rl.Name())
			case h.LockWait > 0:
				fmt.Fprintf(w, "%s: standby, waiting for the lock for %.0fs\n", rl.Name(), h.LockWait.Seconds())
			default:
				fmt.Fprintf(w, "%s: held by another relay of the group\n", rl.Name())
			}
		}
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http.addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	log.Info().Str("addr", ln.Addr().String()).Msg("http: /metrics /healthz /readyz /ui/")
	return srv, nil
}
