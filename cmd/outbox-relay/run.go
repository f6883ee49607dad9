// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/dashboard"
	"github.com/outbox-relay/outbox-relay/internal/httpserve"
	"github.com/outbox-relay/outbox-relay/internal/ops"
	"github.com/outbox-relay/outbox-relay/internal/redisconn"
	"github.com/outbox-relay/outbox-relay/internal/replay"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

func (a *app) newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the relay (the default command)",
		Long: `Run the relay: hold the leader lock for each configured table (of every configured
database), publish due rows to RocketMQ, retry failures with backoff, serve /metrics,
/healthz, /readyz and the dashboard (/ui/) on http.addr, and purge old sent rows when
relay.purge_retention is set. SIGINT or SIGTERM stops it cleanly: the in-flight batch
finishes or is left due, the lock is released, exit 0. With several databases, one that is
down at start is retried while the others are relayed (docs/cli.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.log.Info().Strs("databases", describeDatabases(a.cfg.EffectiveDatabases())).Strs("nameservers", a.cfg.RocketMQ.NameServers).
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
	dbs, err := newRunDatabases(cfg)
	if err != nil {
		return err
	}
	defer closeDatabases(dbs)
	if err := checkAtStart(ctx, dbs, cfg.Relay.Partitions, log); err != nil {
		return err
	}
	rconn, err := connectRedis(ctx, cfg)
	if err != nil {
		return err
	}
	defer rconn.Close()
	rdb := rconn.Client
	router, err := routerFrom(cfg.Routes)
	if err != nil {
		return err
	}
	reg, metrics := newRelayMetrics(cfg)
	link, err := openRocketMQ(ctx, cfg.RocketMQ, log)
	if err != nil {
		return err
	}
	defer link.close()
	pub, err := rocketmq.NewPublisher(rocketmqConfig(cfg, link, log, metrics))
	if err != nil {
		return err
	}
	defer pub.Close()
	tp, stopTracing, err := setupTracing(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	deps := relayDeps{router: router, metrics: metrics, tracer: tp, lockClients: rconn.Redlock, budget: setupMemory(cfg.Relay, log)}
	sources, err := newTableGroups(cfg, dbs, rdb, pub, deps, log)
	if err != nil {
		return err
	}
	audits := &auditPanel{}
	ui, err := startDashboard(ctx, cfg, sources, rconn, pub, dbs, link, router, reg, audits, log)
	if err != nil {
		return err
	}
	defer ui.Stop()
	stopChecks, err := startCheckResponder(ctx, cfg, dbs[0], rdb, reg, log)
	if err != nil {
		return err
	}
	defer stopChecks()
	defer startAuditors(ctx, cfg, dbs, router, reg, log, audits)()
	srv, served, err := serveHTTP(cfg.HTTP, reg, dbs, rdb, ui, log)
	if err != nil {
		return err
	}
	relayEach(ctx, cfg.Relay, dbs, log)
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	<-served // Shutdown closed the listener: Serve has returned or is about to
	log.Info().Msg("stopped")
	return nil
}

// connectRedis opens the lock's Redis and fails unless it answers within 10 seconds.
func connectRedis(ctx context.Context, cfg config.Config) (*redisconn.Conn, error) {
	rconn := redisconn.Open(cfg, redisconn.Options{})
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := rconn.Ping(pctx)
	cancel()
	if err != nil {
		rconn.Close()
		return nil, fmt.Errorf("connect to Redis: %w", err)
	}
	return rconn, nil
}

// newRelayMetrics is the registry /metrics serves (Go and process collectors included) and
// the relay's metrics registered in it, build info set.
func newRelayMetrics(cfg config.Config) (*prometheus.Registry, *relay.Metrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := relay.NewMetricsWith(reg, relay.MetricsOptions{Routes: routeRules(cfg.Routes)})
	v, c, _ := buildInfo()
	metrics.SetBuildInfo(v, c)
	return reg, metrics
}

// newTableGroups creates the relay group of every table of every database (a database's log
// lines name it when several are configured) and returns the dashboard's view of them.
func newTableGroups(cfg config.Config, dbs []*runDatabase, rdb redis.UniversalClient, pub *rocketmq.Publisher, deps relayDeps, log zerolog.Logger) ([]dashboard.Source, error) {
	var sources []dashboard.Source
	for _, d := range dbs {
		deps.log = log
		if d.qualify {
			deps.log = log.With().Str("database_name", d.Name).Logger()
		}
		for _, table := range d.Tables {
			g, err := relay.NewGroup(d.pool, rdb, pub, tableRelayConfig(cfg, d.Database, table, deps))
			if err != nil {
				return nil, fmt.Errorf("database %s: %w", d.Name, err)
			}
			d.groups = append(d.groups, g)
			d.relays = append(d.relays, g.Relays()...)
		}
		db := d.Database
		sources = append(sources, dashboard.Source{Name: d.Name, Label: d.Label(), DB: d.pool, Tables: d.Tables,
			LockKey: func(table string) string { return cfg.LockKeyIn(db, table) }, Partitions: cfg.Relay.Partitions,
			Activity: func(table string) []relay.MinuteActivity { return deps.metrics.Activity(db.Label(), table) }})
	}
	return sources, nil
}

// startDashboard creates and starts the dashboard over sources, with its broker, audit
// (audits) and replay panels; the caller stops it.
func startDashboard(ctx context.Context, cfg config.Config, sources []dashboard.Source, rconn *redisconn.Conn, pub *rocketmq.Publisher,
	dbs []*runDatabase, link rocketMQLink, router relay.Router, reg *prometheus.Registry, audits *auditPanel, log zerolog.Logger) (*dashboard.Dashboard, error) {
	uiCfg := dashboardConfig(cfg, sources, &log)
	uiCfg.Brokers = brokerPanel(pub, dbs, cfg.RocketMQ.AccessKey, link.upstream)
	uiCfg.Audit = audits.tables
	uiCfg.Replay = &dashboard.ReplayConfig{Publisher: pub, Router: router, UnroutedDead: cfg.Relay.Unrouted == config.UnroutedDead,
		MaxBodyBytes: cfg.Relay.MaxBodyBytes, Metrics: replay.NewMetrics(reg)}
	ui, err := dashboard.New(rconn.LockReader(), uiCfg)
	if err != nil {
		return nil, err
	}
	if err := ui.Start(ctx); err != nil {
		return nil, err
	}
	return ui, nil
}

// relayEach relays every database (each as soon as it is ready) until ctx is cancelled and
// all have stopped.
func relayEach(ctx context.Context, rc config.Relay, dbs []*runDatabase, log zerolog.Logger) {
	var wg sync.WaitGroup
	for _, d := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.runWhenReady(ctx, rc, log)
		}()
	}
	wg.Wait()
}

// rocketmqConfig is the publisher's configuration; its log lines (a broker down or back, an
// ordered queue waiting for its broker, sends stored without replication) go to log. It
// reaches RocketMQ through link (openRocketMQ).
func rocketmqConfig(cfg config.Config, link rocketMQLink, log zerolog.Logger, metrics *relay.Metrics) rocketmq.Config {
	return rocketmq.Config{
		NameServers: link.nameServers, Group: cfg.RocketMQ.Group, SendTimeout: cfg.RocketMQ.SendTimeout,
		AccessKey: cfg.RocketMQ.AccessKey, SecretKey: cfg.RocketMQ.SecretKey, Log: log,
		Namespace: cfg.RocketMQ.Namespace, TLS: link.clientTLS,
		RequireReplication: cfg.RocketMQ.RequireReplication, Metrics: metrics,
	}
}

// describeDatabases lists the databases for the start line: name, label and tables each.
func describeDatabases(dbs []config.Database) []string {
	out := make([]string, len(dbs))
	for i, d := range dbs {
		out[i] = d.Name + " " + d.Label() + " " + strings.Join(d.Tables, ",")
	}
	return out
}

// relayDeps are the parts every table's relay shares.
type relayDeps struct {
	router  relay.Router
	metrics *relay.Metrics
	tracer  trace.TracerProvider
	log     zerolog.Logger
	// lockClients are the Redlock masters, when lock.redlock_addrs lists them.
	lockClients []redis.UniversalClient
	// budget bounds the message bodies that every relay of the process holds at once.
	budget *relay.MemoryBudget
}

// tableRelayConfig is the relay.Config of one table of db: the one place where the
// configuration becomes a relay's settings.
func tableRelayConfig(cfg config.Config, db config.Database, table string, deps relayDeps) relay.Config {
	rcfg := relay.Config{
		Table: table, BatchSize: cfg.Relay.BatchSize, Concurrency: cfg.Relay.Concurrency,
		PollInterval: cfg.Relay.PollInterval, DisableBatchSend: !cfg.Relay.BatchSend,
		MaxBodyBytes: cfg.Relay.MaxBodyBytes, Backoff: cfg.Backoff, Router: deps.router,
		Database: db.Label(),
		LockKey:  cfg.LockKeyIn(db, table), LockClients: deps.lockClients, LockTTL: cfg.Lock.TTL, ShutdownTimeout: cfg.Relay.ShutdownTimeout,
		DisableNudge: !cfg.Relay.Nudge, Logger: &deps.log, Metrics: deps.metrics, TracerProvider: deps.tracer,
		Partitions: cfg.Relay.Partitions, MemoryBudget: deps.budget, RecordPositions: cfg.Audit.Enabled,
	}
	if cfg.Relay.Unrouted == config.UnroutedDead {
		rcfg.Unrouted = relay.UnroutedDead
	}
	return rcfg
}

// openMySQL opens and pings the database (see mysqlPool).
func openMySQL(ctx context.Context, dsn string) (*sql.DB, error) {
	db, err := mysqlPool(dsn)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to MySQL (%s): %w", config.RedactDSN(dsn), err)
	}
	return db, nil
}

// mysqlPool returns a pool of the database that connects on first use, with
// interpolateParams on unless the DSN says otherwise: it saves a round trip per statement;
// and rejectReadOnly on unless the DSN says otherwise: a statement refused by a read-only
// server (errors 1290, 1836, 1792: the old primary after a failover) drops its connection,
// and database/sql runs it again on a new one, which reaches the new primary.
func mysqlPool(dsn string) (*sql.DB, error) {
	mc, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql.dsn: %w", err)
	}
	if !strings.Contains(dsn, "interpolateParams=") {
		mc.InterpolateParams = true
	}
	if !strings.Contains(dsn, "rejectReadOnly=") {
		mc.RejectReadOnly = true
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

// acceptsWrites checks that the database the pool reaches answers and accepts writes: a
// read-only server (a replica, or the old primary left running after a failover) answers a
// ping, but the relay can write nothing back there.
func acceptsWrites(ctx context.Context, db *sql.DB) error {
	var readOnly bool
	if err := db.QueryRowContext(ctx, "SELECT @@global.read_only <> 0 OR @@innodb_read_only <> 0").Scan(&readOnly); err != nil {
		return err
	}
	if readOnly {
		return errors.New("the server is read-only (a replica, or the old primary after a failover): the relay can write nothing back")
	}
	return nil
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

// lockHolderText says who holds the lock key, as Redis has it: "held by HOST pid PID", "held",
// "free", or why it could not be read.
func lockHolderText(ctx context.Context, rdb redis.UniversalClient, key string) string {
	st, err := ops.ReadLock(ctx, rdb, key)
	if err != nil {
		return "which could not be read: " + err.Error()
	}
	if !st.Held {
		return "which is free right now"
	}
	if h, ok, err := ops.ReadLockHolder(ctx, rdb, key); err == nil && ok {
		return fmt.Sprintf("held by %s pid %d", h.Host, h.PID)
	}
	return "held by a process that does not say which"
}

// dashboardConfig is the dashboard's configuration for cfg, without the broker panel. Message
// bodies are open to every request only when http.addr is a loopback address: the decision
// is made from the configured address, never from the connection a request arrives on
// (docs/decisions.md, "Who may read message bodies").
func dashboardConfig(cfg config.Config, sources []dashboard.Source, log *zerolog.Logger) dashboard.Config {
	return dashboard.Config{Databases: sources, AdminToken: cfg.HTTP.AdminToken, ReadToken: cfg.HTTP.ReadToken,
		OpenReads: cfg.HTTP.Loopback(), Hosts: cfg.HTTP.Hosts, Logger: log,
		Secrets: []string{cfg.RocketMQ.SecretKey, cfg.HTTP.AdminToken, cfg.HTTP.ReadToken}}
}

// serveHTTP serves /metrics, /healthz, /readyz and the dashboard ui (under /ui/) on addr.
// /healthz fails when a leading relay has heard nothing from its database for its stall
// timeout (it is about to give its lock up); /readyz fails when a database is not ready (down
// at start and being retried) or does not answer, or Redis does not answer, and says which
// tables this process leads and which it waits for. served is closed once the server's
// goroutine has returned, after Shutdown.
func serveHTTP(hc config.HTTP, reg *prometheus.Registry, dbs []*runDatabase, rdb redis.UniversalClient, ui http.Handler, log zerolog.Logger) (srv *httpserve.Server, served <-chan struct{}, err error) {
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	mux.Handle("/metrics", newMetricsPage(reg))
	mux.HandleFunc("/healthz", healthzHandler(dbs))
	mux.HandleFunc("/readyz", readyzHandler(dbs, rdb))
	srv, err = httpserve.Listen(hc.Addr, mux, httpserve.Limits{MaxConnections: hc.MaxConnections, ReservedPaths: []string{"/healthz", "/readyz"}})
	if err != nil {
		return nil, nil, fmt.Errorf("http.addr %s: %w", hc.Addr, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error().Err(err).Msg("http server")
		}
	}()
	log.Info().Str("addr", srv.Addr().String()).Bool("bodies_need_token", !hc.Loopback()).Msg("http: /metrics /healthz /readyz /ui/")
	return srv, done, nil
}

// healthzHandler answers /healthz: 503 naming the first leading relay that has heard nothing from
// its database (or had its writes refused) for its stall timeout, else "ok".
func healthzHandler(dbs []*runDatabase) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		for _, d := range dbs {
			for _, r := range d.relays {
				if h := r.Health(); h.Stalled {
					msg := fmt.Sprintf("stalled: %s: no answer from the database for %.1fs", d.tableName(r.Name()), h.SinceProgress.Seconds())
					if h.WritesRefused > 0 {
						msg = fmt.Sprintf("stalled: %s: the database has refused the relay's writes for %.1fs (read-only after a failover? a revoked grant?)", d.tableName(r.Name()), h.WritesRefused.Seconds())
					}
					http.Error(w, msg, http.StatusServiceUnavailable)
					return
				}
			}
		}
		fmt.Fprintln(w, "ok")
	}
}

// readyzHandler answers /readyz: 503 with the problems when there are any (readinessProblems),
// then in any case one line per relay saying what it does (relayStates).
func readyzHandler(dbs []*runDatabase, rdb redis.UniversalClient) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		problems := readinessProblems(ctx, dbs, rdb)
		states := relayStates(ctx, dbs, rdb)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(problems, "\n"))
		} else {
			fmt.Fprintln(w, "ready")
		}
		for _, s := range states {
			fmt.Fprintln(w, s)
		}
	}
}

// readinessProblems lists what makes the process not ready: a database down at start or
// not accepting writes, Redis not answering, a group membership that is not renewed.
func readinessProblems(ctx context.Context, dbs []*runDatabase, rdb redis.UniversalClient) []string {
	var problems []string
	for _, d := range dbs {
		what := "mysql"
		if d.qualify {
			what = "mysql " + d.Name
		}
		if err := d.why(); err != nil {
			problems = append(problems, what+": not relayed yet: "+err.Error())
		} else if err := acceptsWrites(ctx, d.pool); err != nil {
			problems = append(problems, what+": "+err.Error())
		}
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		problems = append(problems, "redis: "+err.Error())
	}
	for _, d := range dbs {
		for _, g := range d.groups {
			if err := g.MembershipError(); err != nil {
				problems = append(problems, "redis: "+d.tableName(g.Relays()[0].Table())+
					": group membership not renewed, so this relay can never lead (ACL permissions?): "+err.Error())
			}
		}
	}
	return problems
}

// relayStates says, for each relay, whether it waits for its database, leads, stands by
// or leaves the lock to another member, and which topics and brokers hold its rows back.
func relayStates(ctx context.Context, dbs []*runDatabase, rdb redis.UniversalClient) []string {
	var states []string
	for _, d := range dbs {
		for _, rl := range d.relays {
			name := d.tableName(rl.Name())
			switch h := rl.Health(); {
			case d.why() != nil:
				states = append(states, name+": waiting for its database")
			case h.Leader:
				states = append(states, name+": leader")
			case h.LockWait > 0:
				states = append(states, fmt.Sprintf("%s: standby, waiting for the lock for %.0fs", name, h.LockWait.Seconds()))
			default:
				// Not trying for the lock: the group gave it to another member. Say who
				// holds it, never more than Redis knows.
				states = append(states, name+": not trying for its lock, "+lockHolderText(ctx, rdb, rl.LockKey()))
			}
			h := rl.Health()
			for _, topic := range slices.Sorted(maps.Keys(h.MisconfiguredTopics)) {
				// Not a readiness failure: the process is fine, the broker refuses the
				// relay's configuration; the rows wait and OutboxRelayTopicMisconfigured pages.
				states = append(states, fmt.Sprintf("%s: topic %s refused for the relay's configuration (rows wait): %s", name, topic, h.MisconfiguredTopics[topic]))
			}
			for _, broker := range slices.Sorted(maps.Keys(h.FailingBrokers)) {
				states = append(states, fmt.Sprintf("%s: broker %s failing for %.0fs (rows wait, no retry spent)", name, broker, time.Since(h.FailingBrokers[broker]).Seconds()))
			}
		}
	}
	return states
}
