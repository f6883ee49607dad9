// SPDX-License-Identifier: Apache-2.0

package txcheck

import (
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Config configures a Responder.
type Config struct {
	// NameServers are the RocketMQ name servers (host:port) the masters are found through.
	NameServers []string
	// Groups are the producer groups whose check-backs are answered. At least one.
	Groups []string
	// DB is the database of the outbox tables.
	DB *sql.DB
	// Tables are the outbox tables a half may name (OUTBOX_TABLE); a half naming none is
	// answered from the first. At least one.
	Tables []string
	// AccessKey and SecretKey sign the requests sent to brokers with ACL (HEART_BEAT,
	// END_TRANSACTION, the pulls of discarded halves). Default to empty: unsigned.
	AccessKey, SecretKey string
	// TLS, when not nil, connects to the name servers and brokers over TLS with this
	// configuration (verifying the server unless it says InsecureSkipVerify). Defaults to
	// nil: plain TCP.
	TLS *tls.Config
	// Database names the database in metrics (server/schema, no credentials). Defaults to empty.
	Database string
	// ClientID identifies this process to the brokers. Defaults to host@pid@txcheck.
	ClientID string
	// HeartbeatInterval is how often every master is sent the groups again (and the name
	// servers asked for masters); a broker forgets a producer after 120 s without one.
	// Defaults to 30 seconds. A lost connection is redialled within a second.
	HeartbeatInterval time.Duration
	// QueryTimeout bounds the statements of one answer. Defaults to 2 seconds.
	QueryTimeout time.Duration
	// Workers bounds the checks answered at once. Defaults to 8.
	Workers int
	// QueueSize bounds the checks waiting for a worker; a check that finds the queue full is
	// dropped (the broker checks the half again at its next round). Defaults to 256.
	QueueSize int
	// Secrets are the keys of the halves' signatures (outbox.SignHalf): a half is acted on
	// only when its OUTBOX_SIG verifies under one of them (several while one is replaced).
	// At least one, of 16 bytes or more.
	Secrets []string
	// Fence makes an authenticated half whose row is absent, and that names no writer of
	// ours, fence its msg_id with a tombstone row after SDKPatience checks. Defaults to
	// false: such a half is answered UNKNOWN until the broker discards it.
	Fence bool
	// SDKPatience is the number of checks a half whose row is absent, and that names no
	// writer of ours, is answered UNKNOWN before its msg_id is fenced (with Fence). Defaults to 4.
	SDKPatience int
	// EndGrace is how long after its insert (by the database's clock) a committed handed
	// row is answered UNKNOWN rather than COMMIT, leaving a late END of its writer to land:
	// the broker stores a second copy when both a COMMIT and the writer's END reach it.
	// Defaults to 6 seconds, the broker's own default transactionTimeOut; negative: none.
	EndGrace time.Duration
	// DiscardSettle is how long a discarded half is left after the relay first reads it
	// (by the database's clock) before its broker is asked whether the half was committed
	// after all and, if not, its row is made pending: a late answer to the half's last
	// check still commits a discarded half. Defaults to 1 minute; negative: none.
	DiscardSettle time.Duration
	// DiscardGroup is the consumer group under which the halves the brokers discarded
	// (TRANS_CHECK_MAX_TIME_TOPIC) are read; brokers without autoCreateSubscriptionGroup
	// need it created. Defaults to outbox-relay-txrecover.
	DiscardGroup string
	// Release, when set, is called after a check pulled a pending row forward, so that
	// the relay of table wakes now (a nudge). Defaults to nil: the relay's next poll.
	Release func(ctx context.Context, table string)
	// Logger receives one line per answer at debug and problems at warn. Defaults to a
	// disabled logger.
	Logger *zerolog.Logger
	// Registerer registers the metrics. Defaults to none (not exported).
	Registerer prometheus.Registerer
}

func (c *Config) setDefaults() {
	if c.ClientID == "" {
		h, _ := os.Hostname()
		c.ClientID = fmt.Sprintf("%s@%d@txcheck", h, os.Getpid())
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 30 * time.Second
	}
	if c.QueryTimeout <= 0 {
		c.QueryTimeout = 2 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.QueueSize <= 0 {
		c.QueueSize = 256
	}
	if c.SDKPatience <= 0 {
		c.SDKPatience = 4
	}
	switch {
	case c.EndGrace == 0:
		c.EndGrace = 6 * time.Second
	case c.EndGrace < 0:
		c.EndGrace = 0
	}
	switch {
	case c.DiscardSettle == 0:
		c.DiscardSettle = time.Minute
	case c.DiscardSettle < 0:
		c.DiscardSettle = 0
	}
	if c.DiscardGroup == "" {
		c.DiscardGroup = "outbox-relay-txrecover"
	}
	if c.Logger == nil {
		l := zerolog.Nop()
		c.Logger = &l
	}
}

// Validate reports the first problem of c, naming the field.
func (c *Config) Validate() error {
	switch {
	case len(c.NameServers) == 0:
		return errors.New("txcheck: NameServers: at least one is needed")
	case len(c.Groups) == 0:
		return errors.New("txcheck: Groups: at least one is needed")
	case c.DB == nil:
		return errors.New("txcheck: DB: must be set")
	case len(c.Tables) == 0:
		return errors.New("txcheck: Tables: at least one is needed")
	case len(c.Secrets) == 0:
		return errors.New("txcheck: Secrets: at least one is needed (halves are acted on only when signed)")
	}
	for i, s := range c.Secrets {
		if len(s) < MinSecretLen {
			return fmt.Errorf("txcheck: Secrets[%d]: at least %d bytes, got %d", i, MinSecretLen, len(s))
		}
	}
	for _, t := range c.Tables {
		if err := schema.ValidateIdent(t); err != nil {
			return fmt.Errorf("txcheck: Tables: %w", err)
		}
	}
	return nil
}

// MinSecretLen is the shortest secret a Responder accepts.
const MinSecretLen = 16

// Responder registers the check groups with every master broker and answers their
// CHECK_TRANSACTION_STATE requests from the outbox tables. Every relay process runs one,
// leader or not: an answer is a point read by msg_id and needs no lock.
type Responder struct {
	cfg     Config
	dec     *decider
	metrics *Metrics
	queue   chan job
	// beforeAnswer, when set (tests), runs before each queued check is answered.
	beforeAnswer func()

	mu     sync.Mutex
	conns  map[string]*remoting.Conn // master address -> connection
	beatAt map[string]time.Time
	// discardAt is, per master, the offset of TRANS_CHECK_MAX_TIME_TOPIC read up to.
	discardAt map[string]int64
	// discardSeen is, per discarded half (broker/offset), when this process first read it
	// (database clock, epoch ms).
	discardSeen map[string]int64
	svc         *startstop.Func // run
}

// New checks cfg and returns a Responder; Start runs it.
func New(cfg Config) (*Responder, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tables := map[string]bool{}
	for _, t := range cfg.Tables {
		tables[t] = true
	}
	r := &Responder{
		cfg: cfg,
		dec: &decider{db: cfg.DB, tables: tables, defTable: cfg.Tables[0], timeout: cfg.QueryTimeout,
			sdkPatience: cfg.SDKPatience, fence: cfg.Fence, secrets: cfg.Secrets, endGrace: cfg.EndGrace, now: time.Now, release: cfg.Release},
		metrics:     NewMetrics(cfg.Registerer, cfg.Database),
		queue:       make(chan job, cfg.QueueSize),
		conns:       map[string]*remoting.Conn{},
		beatAt:      map[string]time.Time{},
		discardAt:   map[string]int64{},
		discardSeen: map[string]int64{},
	}
	r.svc = startstop.NewReady(r.run)
	return r, nil
}

// Start registers the groups with the masters the name servers know now (the first
// heartbeat is sent before Start returns where a master answers) and keeps them
// registered until Stop. Name servers or brokers that do not answer yet are asked again
// every second until they do. It never fails; the error is startstop.Service's.
func (r *Responder) Start(ctx context.Context) error { return r.svc.Start(ctx) }

// Stop closes the connections (the brokers forget the registrations) and waits for the
// answers in progress. Safe to call twice, or without Start.
func (r *Responder) Stop() { r.svc.Stop() }

// Stopped returns a channel closed once the Responder does not run.
func (r *Responder) Stopped() <-chan struct{} { return r.svc.Stopped() }

// run is the Responder's service: the workers and the loop, until ctx ends; then the
// connections are closed and the answers in progress waited for.
func (r *Responder) run(ctx context.Context, ready func()) {
	masters, err := r.masters(ctx)
	if err != nil {
		r.cfg.Logger.Warn().Err(err).Msg("transactional checks: no name server answered yet; retrying")
	}
	var workers startstop.Tasks
	defer workers.Stop() // the answers in progress, after the connections are closed
	defer r.closeConns()
	for i := 0; i < r.cfg.Workers; i++ {
		workers.Go(func() { r.work(ctx) })
	}
	r.sync(ctx, masters)
	ready()
	r.loop(ctx, masters)
}

// closeConns closes the connections to the masters.
func (r *Responder) closeConns() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, c := range r.conns {
		_ = c.Close()
		delete(r.conns, addr)
	}
}

func (r *Responder) loop(ctx context.Context, masters []string) {
	r.recoverDiscarded(ctx)
	tick := time.Second
	if r.cfg.HeartbeatInterval < tick {
		tick = r.cfg.HeartbeatInterval
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	refreshed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if len(masters) == 0 || time.Since(refreshed) >= r.cfg.HeartbeatInterval {
			if m, err := r.masters(ctx); err == nil {
				masters = m
			} else {
				r.cfg.Logger.Warn().Err(err).Msg("transactional checks: no name server answered; keeping the masters known")
			}
			refreshed = time.Now()
			r.sync(ctx, masters)
			r.recoverDiscarded(ctx)
			continue
		}
		r.sync(ctx, masters)
	}
}

// masters returns the union of the masters every name server knows, sorted.
func (r *Responder) masters(ctx context.Context) ([]string, error) {
	m, err := remoting.FindMasters(ctx, r.cfg.NameServers, nil, remoting.WithTLSConfig(r.cfg.TLS))
	if err != nil {
		return nil, fmt.Errorf("txcheck: masters: %w", err)
	}
	out := slices.Sorted(maps.Values(m))
	return slices.Compact(out), nil
}

// sync dials the masters without a live connection, heartbeats those due, and closes
// connections to brokers that are masters no longer.
func (r *Responder) sync(ctx context.Context, masters []string) {
	want := map[string]bool{}
	for _, a := range masters {
		want[a] = true
	}
	r.mu.Lock()
	for addr, c := range r.conns {
		if !want[addr] {
			_ = c.Close()
			delete(r.conns, addr)
		}
	}
	r.mu.Unlock()
	live := 0
	for _, addr := range masters {
		r.mu.Lock()
		c := r.conns[addr]
		due := time.Since(r.beatAt[addr]) >= r.cfg.HeartbeatInterval
		r.mu.Unlock()
		if c != nil && c.Closed() {
			c = nil
		}
		if c == nil {
			dctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			nc, err := remoting.Dial(dctx, addr, r.serve, remoting.WithTLSConfig(r.cfg.TLS),
				remoting.WithCredentials(remoting.Credentials{AccessKey: r.cfg.AccessKey, SecretKey: r.cfg.SecretKey}))
			cancel()
			if err != nil {
				lvl := zerolog.DebugLevel
				if certificateRefused(err) {
					lvl = zerolog.WarnLevel
				}
				r.cfg.Logger.WithLevel(lvl).Err(err).Str("broker", addr).Msg("transactional checks: dial")
				continue
			}
			c, due = nc, true
			r.mu.Lock()
			r.conns[addr] = c
			r.mu.Unlock()
		}
		if due {
			if err := r.heartbeat(ctx, c); err != nil {
				r.cfg.Logger.Warn().Err(err).Str("broker", addr).Msg("transactional checks: heartbeat failed")
				_ = c.Close()
				continue
			}
			r.mu.Lock()
			r.beatAt[addr] = time.Now()
			r.mu.Unlock()
		}
		live++
	}
	r.metrics.brokers.Set(float64(live))
}

// heartbeat registers the groups with one broker (HEART_BEAT, producer data only).
func (r *Responder) heartbeat(ctx context.Context, c *remoting.Conn) error {
	type group struct {
		GroupName string `json:"groupName"`
	}
	body := struct {
		ClientID  string  `json:"clientID"`
		Producers []group `json:"producerDataSet"`
		Consumers []any   `json:"consumerDataSet"`
	}{ClientID: r.cfg.ClientID, Consumers: []any{}}
	for _, g := range r.cfg.Groups {
		body.Producers = append(body.Producers, group{g})
	}
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := c.Invoke(ctx, remoting.HeartBeat, nil, b)
	if err != nil {
		return err
	}
	if resp.Code != 0 {
		return fmt.Errorf("txcheck: heartbeat to %s: code %d: %s", c.Addr(), resp.Code, resp.Remark)
	}
	return nil
}

// serve handles a request the broker sent: only check-backs are expected. It runs on the
// connection's read loop, so it never blocks: the check's message is decoded (its body left
// as it is, never inflated), a check of a group not configured is dropped before any other
// work, one whose half is not signed is answered UNKNOWN at once (it never takes a place in
// the queue), and the rest is queued for the workers; a full queue drops the check (the broker
// checks again at its next round). So a flood of forged checks costs a bounded queue, not a
// goroutine and an inflated body each.
func (r *Responder) serve(c *remoting.Conn, req *remoting.Request) {
	if req.Code != remoting.CheckTransactionState {
		return
	}
	msg, err := remoting.DecodeMessage(req.Body)
	if err != nil {
		r.cfg.Logger.Warn().Err(err).Str("broker", c.Addr()).Msg("transactional check with an unreadable message")
		r.metrics.Dropped("unreadable")
		return
	}
	if !slices.Contains(r.cfg.Groups, msg.Properties["PGROUP"]) {
		r.metrics.Dropped("foreign_group")
		return
	}
	chk := checkOf(msg)
	if _, reason := r.dec.authenticate(chk); reason != "" {
		r.metrics.Observe(chk.Group, Unknown, reason, chk.Times) // nothing to ask the database
		r.cfg.Logger.Debug().Str("group", chk.Group).Str("msg_id", msg.Properties["OUTBOX_MSG_ID"]).Int("check", chk.Times).
			Str("answer", Unknown.String()).Str("reason", reason).Msg("transactional check")
		return
	}
	select {
	case r.queue <- job{c: c, req: req, msg: msg}:
	default:
		r.metrics.Dropped("queue_full")
	}
}

// checkOf reads the check a check-back's message carries.
func checkOf(msg *remoting.Message) Check {
	times, _ := strconv.Atoi(msg.Properties[checkTimesProperty])
	return Check{Group: msg.Properties["PGROUP"], Topic: msg.Topic, Properties: msg.Properties, Times: times}
}

// job is a check queued for the workers.
type job struct {
	c   *remoting.Conn
	req *remoting.Request
	msg *remoting.Message
}

// work answers queued checks until ctx ends.
func (r *Responder) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-r.queue:
			if r.beforeAnswer != nil {
				r.beforeAnswer()
			}
			r.answer(j.c, j.req, j.msg)
		}
	}
}

func (r *Responder) answer(c *remoting.Conn, req *remoting.Request, msg *remoting.Message) {
	log := r.cfg.Logger
	chk := checkOf(msg)
	times := chk.Times
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.QueryTimeout+time.Second)
	defer cancel()
	ans, reason := r.dec.decide(ctx, chk)
	r.metrics.Observe(chk.Group, ans, reason, times)
	log.Debug().Str("group", chk.Group).Str("msg_id", msg.Properties["OUTBOX_MSG_ID"]).Int("check", times).
		Str("answer", ans.String()).Str("reason", reason).Msg("transactional check")
	if ans == Unknown {
		return
	}
	uniq := req.Ext["transactionId"]
	if uniq == "" {
		uniq = msg.Properties["UNIQ_KEY"]
	}
	msgID := req.Ext["msgId"]
	if msgID == "" {
		msgID = uniq
	}
	ext := map[string]string{
		"producerGroup":        chk.Group,
		"tranStateTableOffset": req.Ext["tranStateTableOffset"],
		"commitLogOffset":      req.Ext["commitLogOffset"],
		"commitOrRollback":     strconv.Itoa(int(ans)),
		"fromTransactionCheck": "true",
		"msgId":                msgID,
		"transactionId":        uniq,
		"topic":                msg.Topic,
		"bname":                req.Ext["bname"],
	}
	if ans == Rollback {
		if err := c.Oneway(ctx, remoting.EndTransaction, ext, nil); err != nil {
			log.Warn().Err(err).Str("broker", c.Addr()).Msg("transactional check: END_TRANSACTION not sent; the broker checks again")
		}
		return
	}
	// A COMMIT is sent synchronously: the row is marked sent only once the broker stored
	// the message. Unanswered or refused, the row stays handed and the next check commits.
	resp, err := c.Invoke(ctx, remoting.EndTransaction, ext, nil)
	switch {
	case err != nil:
		log.Warn().Err(err).Str("broker", c.Addr()).Msg("transactional check: COMMIT unanswered; the broker checks again")
		return
	case resp.Code != 0:
		log.Warn().Int("code", int(resp.Code)).Str("remark", resp.Remark).Str("broker", c.Addr()).Msg("transactional check: COMMIT refused; the broker checks again")
		return
	}
	if err := r.dec.markCommitted(ctx, msg.Properties); err != nil {
		// The message is stored; a later check of this half would commit a second copy.
		log.Warn().Err(err).Msg("transactional check: COMMIT stored but the row not marked sent")
	}
}

// certificateRefused reports whether err is a TLS verification failure: the server's
// certificate not signed by a trusted CA or not valid for the name verified.
func certificateRefused(err error) bool {
	var ve *tls.CertificateVerificationError
	return errors.As(err, &ve)
}
