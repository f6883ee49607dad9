// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/backoff"
	"github.com/outbox-relay/outbox-relay/schema"
)

// Values of relay.unrouted.
const (
	// UnroutedDefault publishes a message that matches no route with the default producer
	// settings (rocketmq.group, rocketmq.send_timeout).
	UnroutedDefault = "default"
	// UnroutedDead marks a message that matches no route dead at once: strict routing.
	UnroutedDead = "dead"
)

// Values of log.format.
const (
	// LogFormatAuto (the default, written as "" or "auto") is JSON, or console on a terminal.
	LogFormatAuto    = ""
	LogFormatJSON    = "json"
	LogFormatConsole = "console"
)

// Limits enforced by Validate.
const (
	MaxBatchSize   = 10000
	MaxConcurrency = 1024
	MaxDelayLevel  = 18
	// MaxBodyBytesLimit bounds relay.max_body_bytes; RocketMQ brokers default to 4 MiB.
	MaxBodyBytesLimit = 64 << 20
)

// Config is the sidecar's whole configuration, as produced by Load. The zero value is not
// useful: use Load, or Default for the documented defaults.
type Config struct {
	MySQL MySQL
	// Databases lists several databases relayed by one process (databases), instead of the
	// single-database form of MySQL. Defaults to none. Read the databases to relay through
	// EffectiveDatabases, which covers both forms.
	Databases []Database
	Redis     Redis
	RocketMQ  RocketMQ
	Relay     Relay
	// Audit configures the broker audit (audit.*).
	Audit Audit
	Lock  Lock
	// Backoff is the retry delay policy (backoff.base, backoff.multiplier, backoff.max,
	// backoff.jitter). Defaults to 1s doubling up to 1h, no jitter.
	Backoff backoff.Policy
	// Routes map topic and tag patterns to producer settings, first match wins (routes).
	// Defaults to none: every message uses the default producer settings.
	Routes []Route
	HTTP   HTTP
	Log    Log
}

// MySQL is where the outbox table lives.
type MySQL struct {
	// DSN is the go-sql-driver/mysql DSN (mysql.dsn). Required unless Databases is set: there
	// is no default, so a forgotten DSN never reaches a database nobody chose.
	// It may hold a password: print it only through Redacted.
	DSN string
	// Table is the outbox table (mysql.table). Defaults to local_message.
	Table string
	// Tables, when not empty, lists several outbox tables to relay and overrides Table
	// (mysql.tables). Defaults to empty.
	Tables []string
	// ConnMaxLifetime closes a pooled connection this long after it was dialled
	// (mysql.conn_max_lifetime), in every database's pool, so that connections move to a
	// new primary after a failover even where nothing else finds out. Defaults to 5m.
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes a pooled connection idle this long (mysql.conn_max_idle_time).
	// Defaults to 1m.
	ConnMaxIdleTime time.Duration
}

// Redis holds the connection used for the leader lock and nudges: one node (Addr), a
// Sentinel-managed master (Addrs + MasterName) or a Cluster (Addrs + Cluster).
type Redis struct {
	// Addr is host:port of a single Redis (redis.addr), used when Addrs is empty. Defaults to
	// 127.0.0.1:6379.
	Addr string
	// Password is the AUTH password of the Redis nodes (redis.password); Redlock masters
	// (lock.redlock_addrs) use it too. Defaults to empty. Secret.
	Password string
	// DB is the database number (redis.db); a Cluster has only 0. Defaults to 0.
	DB int
	// Addrs, when not empty, replaces Addr (redis.addrs; comma-separated in the environment):
	// the Sentinels' host:port when MasterName is set, the Cluster's seed nodes when Cluster
	// is true. One of the two must be set with it. Defaults to empty.
	Addrs []string
	// MasterName is the Sentinel-monitored master's name (redis.master_name): the client asks
	// the Sentinels in Addrs where the master is and follows failovers. Defaults to empty.
	MasterName string
	// SentinelPassword is the Sentinels' own AUTH password (redis.sentinel_password), when
	// they have one. Defaults to empty. Secret.
	SentinelPassword string
	// Username is the ACL user of the Redis nodes (redis.username), empty for the default
	// user. Defaults to empty.
	Username string
	// Cluster says that Addrs are seeds of a Redis Cluster (redis.cluster). It is never
	// inferred from the number of addresses, so a Sentinel list missing its master name is an
	// error rather than a Cluster client. Defaults to false.
	Cluster bool
}

// Mode names how the Redis connection is made: "single", "sentinel" or "cluster".
func (r Redis) Mode() string {
	switch {
	case len(r.Addrs) > 0 && r.MasterName != "":
		return "sentinel"
	case len(r.Addrs) > 0 && r.Cluster:
		return "cluster"
	default:
		return "single"
	}
}

// RocketMQ holds the producer's connection and default settings.
type RocketMQ struct {
	// NameServers are host:port addresses (rocketmq.nameservers; comma-separated in the
	// environment). Defaults to [127.0.0.1:9876].
	NameServers []string
	// AccessKey is the ACL access key (rocketmq.access_key). Defaults to empty (no ACL).
	AccessKey string
	// SecretKey is the ACL secret key (rocketmq.secret_key). Defaults to empty. Secret.
	SecretKey string
	// Group is the default producer group (rocketmq.group). Defaults to outbox-relay.
	Group string
	// SendTimeout bounds one send attempt (rocketmq.send_timeout). Defaults to 3 seconds.
	SendTimeout time.Duration
	// Namespace is the RocketMQ namespace (rocketmq.namespace), an instance id on some
	// managed offerings: topics are sent as "namespace%topic". Defaults to empty (none).
	Namespace string
	// TLS configures TLS to the name servers and brokers (rocketmq.tls.*).
	TLS RocketMQTLS
	// RequireReplication counts a send the broker stored without replicating or flushing
	// it as asked (SLAVE_NOT_AVAILABLE and the flush timeouts) as a failed attempt
	// (rocketmq.require_replication). Defaults to false: stored means sent.
	RequireReplication bool
	// TransactionCheckGroups are the producer groups whose transactional check-backs every
	// relay process answers from the outbox table (rocketmq.transaction_check_groups; see
	// docs/transactional.md). Defaults to none: no responder runs.
	TransactionCheckGroups []string
	// TransactionCheckSecrets are the keys of the halves' signatures
	// (rocketmq.transaction_check_secrets): the responder acts on a row only for a half
	// signed with one of them. Required with TransactionCheckGroups. Secret.
	TransactionCheckSecrets []string
	// TransactionCheckFence makes the responder fence the msg_id of a signed half whose row
	// is absent and that names no writer of ours (rocketmq.transaction_check_fence).
	// Defaults to false.
	TransactionCheckFence bool
}

// RocketMQTLS is TLS to RocketMQ. Enabled, it verifies the server against CAFile (or the
// system's CAs) and ServerName; rocketmq-client-go cannot verify, so the relay's sends go
// through a verifying bridge in the process (internal/tlsbridge). InsecureSkipVerify instead
// uses the client's own TLS, which encrypts and verifies nothing.
type RocketMQTLS struct {
	// Enable turns TLS on for every connection to RocketMQ (rocketmq.tls.enable). Defaults
	// to false.
	Enable bool
	// InsecureSkipVerify accepts any server certificate (rocketmq.tls.insecure_skip_verify).
	// Defaults to false: the server is verified.
	InsecureSkipVerify bool
	// CAFile is a PEM file of the CAs to verify the server with (rocketmq.tls.ca_file).
	// Defaults to empty: the system's CAs.
	CAFile string
	// ServerName is the name the server's certificate must be valid for
	// (rocketmq.tls.server_name). Defaults to empty: the host of each address dialled.
	ServerName string
	// CertFile and KeyFile are the PEM certificate and key presented to brokers that ask
	// for one (rocketmq.tls.cert_file, rocketmq.tls.key_file), both or neither. Default to
	// empty: none.
	CertFile, KeyFile string
}

// KeyError is an error of the setting Key.
type KeyError struct {
	// Key is the setting's key (rocketmq.tls.ca_file, say).
	Key string
	// Err is what is wrong with it.
	Err error
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// Verified reports whether TLS is on and verifies the server.
func (t RocketMQTLS) Verified() bool { return t.Enable && !t.InsecureSkipVerify }

// ClientConfig returns the TLS configuration of connections to RocketMQ: nil with TLS off,
// one that skips verification with InsecureSkipVerify, else one that verifies the server. An
// error names the key of the file that cannot be used.
func (t RocketMQTLS) ClientConfig() (*tls.Config, error) {
	switch {
	case !t.Enable:
		return nil, nil
	case t.InsecureSkipVerify:
		return &tls.Config{InsecureSkipVerify: true}, nil
	}
	cfg := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, &KeyError{Key: KeyRocketMQTLSCAFile, Err: err}
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, &KeyError{Key: KeyRocketMQTLSCAFile, Err: fmt.Errorf("%s holds no PEM certificate", t.CAFile)}
		}
	}
	if t.CertFile != "" && t.KeyFile != "" {
		pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &KeyError{Key: KeyRocketMQTLSCertFile, Err: fmt.Errorf("with %s: %w", KeyRocketMQTLSKeyFile, err)}
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Relay tunes the delivery engine.
type Relay struct {
	// PollInterval is the time between scans for due rows (relay.poll_interval).
	// Defaults to 1 second.
	PollInterval time.Duration
	// BatchSize is the number of rows read and published per batch (relay.batch_size), 1 to
	// 10000. Defaults to 500.
	BatchSize int
	// Concurrency is the number of publishing goroutines (relay.concurrency), 1 to 1024.
	// Defaults to 16.
	Concurrency int
	// BatchSend sends several messages of the same topic in one broker request
	// (relay.batch_send). Defaults to true.
	BatchSend bool
	// Nudge listens to Redis nudges sent by writers after commit, to publish without
	// waiting for the next poll (relay.nudge). Defaults to true.
	Nudge bool
	// Unrouted says what happens to a message no route matches (relay.unrouted):
	// UnroutedDefault publishes it with the default settings, UnroutedDead marks it dead.
	// Defaults to UnroutedDefault.
	Unrouted string
	// MaxBodyBytes is the largest body published; a longer one is marked dead
	// (relay.max_body_bytes). Defaults to 4194304 (4 MiB, the broker's default limit).
	MaxBodyBytes int
	// ShutdownTimeout bounds the wait for the in-flight batch on shutdown
	// (relay.shutdown_timeout). Defaults to 15 seconds.
	ShutdownTimeout time.Duration
	// PurgeRetention is the age past which sent rows are deleted periodically
	// (relay.purge_retention); 0 turns the periodic purge off, else at least
	// MinPurgeRetention. Defaults to 0.
	PurgeRetention time.Duration
	// PurgeInterval is the time between periodic purges (relay.purge_interval).
	// Defaults to 10 minutes.
	PurgeInterval time.Duration
	// Partitions splits each table into this many partitions, each under its own lock,
	// shared among the relays running the table (relay.partitions), 1 to 1024. The table
	// needs the partition column for the same number: run migrate. Defaults to 1: one lock
	// per table, one relay publishing.
	Partitions int
	// MemoryLimit is the memory the process may use, in bytes (relay.memory_limit): the
	// message bodies held at once are bounded by MemoryLimit / MemoryBudgetShare, and
	// GOMEMLIMIT is set from it unless the environment sets it. 0 reads the container's
	// limit (cgroup memory.max); without one, the bodies' budget is DefaultMemoryBudget.
	// Defaults to 0.
	MemoryLimit int64
}

// Audit configures the broker audit: sent rows checked against the broker, those it lost
// after acknowledging them sent again (docs/decisions.md, "Broker audit").
type Audit struct {
	// Enabled runs the audit in every relay group, one owner at a time (audit.enabled).
	// Defaults to true.
	Enabled bool
	// MinAge: rows sent more recently are not checked yet (audit.min_age). Defaults to 1m.
	MinAge time.Duration
	// MaxAge: rows sent longer ago are not checked (audit.max_age); keep it within the
	// brokers' retention. Defaults to 24h.
	MaxAge time.Duration
	// Rate bounds the rows checked per second per table (audit.rate). Defaults to 200.
	Rate float64
	// BatchSize is the rows checked at a time, 1 to 1000 (audit.batch_size). Defaults to 100.
	BatchSize int
}

// MemoryBudgetShare is the share of relay.memory_limit given to message bodies: a body
// costs the relay a few times its size while it is sent (the row read, the client's
// compressed copy and request frame), beside the process's own 30 MB.
const MemoryBudgetShare = 16

// DefaultMemoryBudget bounds the bodies held at once when no memory limit is known.
const DefaultMemoryBudget = 32 << 20

// MinMemoryLimit is the smallest relay.memory_limit accepted: the relay itself needs about
// 30 MB.
const MinMemoryLimit = 48 << 20

// Lock configures the leader lock held in Redis.
type Lock struct {
	// TTL is the lock's expiry, extended every third of it (lock.ttl). A relay that dies
	// holding the lock is replaced after about one TTL. Defaults to 10 seconds.
	TTL time.Duration
	// Key is the Redis key of the lock (lock.key): "{db}" is replaced by the database's
	// server and schema (DatabaseLabel, never credentials) and "{table}" by the table name,
	// so that services sharing a Redis never wait on each other's locks. Defaults to
	// outbox-relay:lock:{db}:{table}.
	Key string
	// RedlockAddrs, when not empty, are independent Redis masters (host:port, no replicas
	// between them) that hold the lock as a Redlock quorum: a relay leads while a majority
	// of them holds its lock (lock.redlock_addrs; comma-separated in the environment). An odd
	// number, at least MinRedlockMasters. They use redis.username, redis.password and
	// redis.db; nudges still go through redis.*. Defaults to empty: the lock lives on redis.*.
	RedlockAddrs []string
}

// MinRedlockMasters is the fewest masters lock.redlock_addrs accepts: with fewer, losing one
// master loses the quorum, which is no better than a single Redis.
const MinRedlockMasters = 3

// KeyFor returns the lock key for table of database db (a DatabaseLabel).
func (l Lock) KeyFor(db, table string) string {
	return strings.NewReplacer("{db}", db, "{table}", table).Replace(l.Key)
}

// Route maps messages whose topic and tag match its patterns to producer settings.
// Patterns are globs (path.Match syntax): "*" matches anything, "order-*" a prefix.
type Route struct {
	// Topic is the topic pattern (routes[].topic). Required.
	Topic string `json:"topic" yaml:"topic"`
	// Tag is the tag pattern (routes[].tag). Defaults to "*".
	Tag string `json:"tag" yaml:"tag"`
	// Group is the producer group (routes[].group). Defaults to rocketmq.group.
	Group string `json:"group,omitempty" yaml:"group,omitempty"`
	// SendTimeout bounds one send attempt (routes[].send_timeout). Defaults to
	// rocketmq.send_timeout.
	SendTimeout time.Duration `json:"-" yaml:"-"`
	// Ordered sends messages with the same sharding_key to one queue in id order
	// (routes[].ordered). Defaults to false.
	Ordered bool `json:"ordered,omitempty" yaml:"ordered,omitempty"`
	// DelayLevel is RocketMQ's delay level, 0 (none) to 18 (routes[].delay_level).
	// Defaults to 0.
	DelayLevel int `json:"delay_level,omitempty" yaml:"delay_level,omitempty"`
}

// Matches reports whether topic and tag match the route's patterns.
func (r Route) Matches(topic, tag string) bool {
	okTopic, _ := path.Match(r.Topic, topic)
	if !okTopic {
		return false
	}
	okTag, _ := path.Match(r.Tag, tag)
	return okTag
}

// HTTP configures the metrics and health server.
type HTTP struct {
	// Addr is the listen address for /metrics, /healthz and /readyz (http.addr).
	// Defaults to :9464.
	Addr string
	// AdminToken enables the dashboard's state changes (requeue) for requests that carry it
	// as a bearer token (http.admin_token); empty keeps the dashboard read-only. At least
	// MinAdminTokenLen characters. Defaults to empty. Secret.
	AdminToken string
	// ReadToken lets requests that carry it as a bearer token read message bodies in the
	// dashboard (http.read_token); the admin token reads too. Needed unless Addr is a
	// loopback address. At least MinAdminTokenLen characters. Defaults to empty. Secret.
	ReadToken string
	// Hosts are the names the dashboard answers to besides localhost and IP addresses
	// (http.hosts): a request naming another host is refused (DNS rebinding). Defaults to none.
	Hosts []string
	// MaxConnections bounds the server's open connections (http.max_connections); idle and
	// stalled ones make room for new ones. Defaults to 1024.
	MaxConnections int
}

// Loopback reports whether Addr listens on a loopback address only ("127.0.0.1:9464",
// "[::1]:9464", "localhost:9464"); ":9464" listens on every interface.
func (h HTTP) Loopback() bool {
	host, _, err := net.SplitHostPort(h.Addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// MinPurgeRetention is the shortest relay.purge_retention (ops.MinPurgeRetention, which the
// purge command also enforces unless told otherwise).
const MinPurgeRetention = time.Hour

// MinAdminTokenLen is the shortest http.admin_token accepted.
const MinAdminTokenLen = 16

// tokenPlaceholder marks the example tokens of the shipped manifests ("CHANGE-ME-..."): a
// token containing it was copied, not generated, and is known to everyone who read them.
const tokenPlaceholder = "change-me"

// checkToken refuses a set token that is short, has spaces or is a placeholder, naming key and
// never echoing the token.
func checkToken(key, t string, bad func(key, format string, args ...any)) {
	switch {
	case t == "":
	case len(t) < MinAdminTokenLen || strings.ContainsAny(t, " \t\r\n"):
		bad(key, "must be at least %d characters without spaces (got %d characters)", MinAdminTokenLen, len(t))
	case strings.Contains(strings.ToLower(t), tokenPlaceholder):
		bad(key, "is a placeholder of the example manifests (it contains %q): generate one, e.g. openssl rand -hex 24", "CHANGE-ME")
	}
}

// Log configures logging.
type Log struct {
	// Level is a zerolog level name (log.level). Defaults to info.
	Level string
	// Format is LogFormatJSON or LogFormatConsole (log.format). Defaults to LogFormatAuto:
	// JSON, or console when stderr is a terminal.
	Format string
}

// Tables returns the tables to relay: MySQL.Tables when set, else MySQL.Table.
func (c Config) Tables() []string {
	if len(c.MySQL.Tables) > 0 {
		return slices.Clone(c.MySQL.Tables)
	}
	return []string{c.MySQL.Table}
}

// Default returns the configuration with every key at its default, whatever the
// environment. mysql.dsn has no default, so Default alone does not validate.
func Default() Config {
	c, probs, err := decode(defaultsViper(), "", nil)
	if err != nil || len(probs) > 0 {
		panic(fmt.Sprintf("config: defaults do not decode: %v %v", err, probs)) // a bug in this package
	}
	return c
}

// problem is one invalid value, named by its key.
type problem struct {
	key, msg string
}

func (p problem) err() error { return fmt.Errorf("%s: %s", p.key, p.msg) }

// Validate checks every value and returns all problems at once, each naming its key.
func (c Config) Validate() error {
	var errs []error
	for _, p := range c.problems() {
		errs = append(errs, p.err())
	}
	return errors.Join(errs...)
}

// reporter records one invalid value under its key.
type reporter = func(key, format string, args ...any)

// problems lists every invalid value of c, section by section.
func (c Config) problems() []problem {
	var out []problem
	bad := func(key, format string, args ...any) {
		out = append(out, problem{key, fmt.Sprintf(format, args...)})
	}
	c.storeProblems(bad)
	c.redisProblems(bad)
	c.rocketMQProblems(bad)
	positive(bad, KeyMySQLConnMaxLifetime, c.MySQL.ConnMaxLifetime)
	positive(bad, KeyMySQLConnMaxIdleTime, c.MySQL.ConnMaxIdleTime)
	c.relayProblems(bad)
	c.lockProblems(bad)
	c.backoffProblems(bad)
	c.routeProblems(bad)
	c.httpLogProblems(bad)
	return out
}

// reportAll passes problems found by a section's own checker on to bad.
func reportAll(bad reporter, ps []problem) {
	for _, p := range ps {
		bad(p.key, "%s", p.msg)
	}
}

// storeProblems checks the default database (mysql.*) and the databases list.
func (c Config) storeProblems(bad reporter) {
	switch {
	case len(c.Databases) > 0:
		// databaseProblems: mysql.dsn must then be unset.
	case c.MySQL.DSN == "":
		bad(KeyMySQLDSN, "missing: the relay has no default database; set it in the file, in %s or with --%s "+
			"(e.g. relay:secret@tcp(db:3306)/shop), or list databases", EnvName(KeyMySQLDSN), FlagName(KeyMySQLDSN))
	default:
		if p := dsnProblem(c.MySQL.DSN); p != "" {
			bad(KeyMySQLDSN, "%s", p)
		}
	}
	if err := schema.ValidateIdent(c.MySQL.Table); err != nil {
		bad(KeyMySQLTable, "%v", err)
	}
	tableProblems(bad, KeyMySQLTables, c.MySQL.Tables)
	c.databaseProblems(bad)
}

// redisProblems checks where the lock's Redis is and how to reach it.
func (c Config) redisProblems(bad reporter) {
	if err := hostPort(c.Redis.Addr); err != nil {
		bad(KeyRedisAddr, "%v", err)
	}
	if c.Redis.DB < 0 {
		bad(KeyRedisDB, "must be >= 0, got %d", c.Redis.DB)
	}
	reportAll(bad, c.Redis.problems())
}

// rocketMQProblems checks the name servers, credentials, producer group,
// namespace, TLS and transaction check group.
func (c Config) rocketMQProblems(bad reporter) {
	if len(c.RocketMQ.NameServers) == 0 {
		bad(KeyRocketMQNameServers, "must list at least one name server")
	}
	for i, ns := range c.RocketMQ.NameServers {
		if err := nameServer(ns); err != nil {
			bad(fmt.Sprintf("%s[%d]", KeyRocketMQNameServers, i), "%v", err)
		}
	}
	if (c.RocketMQ.AccessKey == "") != (c.RocketMQ.SecretKey == "") {
		bad(KeyRocketMQSecretKey, "rocketmq.access_key and rocketmq.secret_key must be set together")
	}
	if c.RocketMQ.Group == "" {
		bad(KeyRocketMQGroup, "must not be empty")
	}
	positive(bad, KeyRocketMQSendTimeout, c.RocketMQ.SendTimeout)
	if ns := c.RocketMQ.Namespace; ns != "" && !validNamespace(ns) {
		bad(KeyRocketMQNamespace, "must be 1 to %d letters, digits, '-' or '_' (RocketMQ joins it to topics with '%%'), got %q", maxNamespaceLen, ns)
	}
	c.RocketMQ.TLS.problems(bad)
	reportAll(bad, c.checkGroupProblems())
}

// relayProblems checks the relay loop's pacing, sizes, retention and the audit.
func (c Config) relayProblems(bad reporter) {
	positive(bad, KeyRelayPollInterval, c.Relay.PollInterval)
	between(bad, KeyRelayBatchSize, c.Relay.BatchSize, 1, MaxBatchSize)
	between(bad, KeyRelayConcurrency, c.Relay.Concurrency, 1, MaxConcurrency)
	if c.Relay.Unrouted != UnroutedDefault && c.Relay.Unrouted != UnroutedDead {
		bad(KeyRelayUnrouted, "must be %q or %q, got %q", UnroutedDefault, UnroutedDead, c.Relay.Unrouted)
	}
	between(bad, KeyRelayMaxBodyBytes, c.Relay.MaxBodyBytes, 1, MaxBodyBytesLimit)
	positive(bad, KeyRelayShutdownTimeout, c.Relay.ShutdownTimeout)
	if r := c.Relay.PurgeRetention; r < 0 || (r > 0 && r < MinPurgeRetention) {
		bad(KeyRelayPurgeRetention, "must be 0 (off) or at least %s: a purged row's msg_id can be inserted and published again, got %s", MinPurgeRetention, r)
	}
	positive(bad, KeyRelayPurgeInterval, c.Relay.PurgeInterval)
	between(bad, KeyRelayPartitions, c.Relay.Partitions, 1, schema.MaxPartitions)
	positive(bad, KeyAuditMinAge, c.Audit.MinAge)
	if c.Audit.MaxAge <= c.Audit.MinAge {
		bad(KeyAuditMaxAge, "must be longer than audit.min_age (%s), got %s", c.Audit.MinAge, c.Audit.MaxAge)
	}
	if c.Audit.Rate <= 0 {
		bad(KeyAuditRate, "must be a positive number of rows per second, got %g", c.Audit.Rate)
	}
	between(bad, KeyAuditBatchSize, c.Audit.BatchSize, 1, 1000)
	if m := c.Relay.MemoryLimit; m != 0 && m < MinMemoryLimit {
		bad(KeyRelayMemoryLimit, "must be 0 (the container's limit) or at least %d bytes (48 MiB), got %d", MinMemoryLimit, m)
	}
}

// lockProblems checks the lock's TTL and that its key tells every relayed
// database and table apart.
func (c Config) lockProblems(bad reporter) {
	if c.Lock.TTL < 100*time.Millisecond {
		bad(KeyLockTTL, "must be at least 100ms, got %s", c.Lock.TTL)
	}
	if c.Lock.Key == "" {
		bad(KeyLockKey, "must not be empty")
	} else {
		dbs := c.EffectiveDatabases()
		if len(dbs) > 1 && !strings.Contains(c.Lock.Key, "{db}") {
			bad(KeyLockKey, "must contain {db} when several databases are relayed, got %q", c.Lock.Key)
		}
		for _, d := range dbs {
			if len(d.Tables) > 1 && !strings.Contains(c.Lock.Key, "{table}") {
				bad(KeyLockKey, "must contain {table} when several tables are relayed, got %q", c.Lock.Key)
				break
			}
		}
	}
	reportAll(bad, c.Lock.redlockProblems())
}

// backoffProblems checks the retry backoff curve.
func (c Config) backoffProblems(bad reporter) {
	positive(bad, KeyBackoffBase, c.Backoff.Base)
	if !(c.Backoff.Multiplier >= 1) || c.Backoff.Multiplier > 1e6 {
		bad(KeyBackoffMultiplier, "must be between 1 and 1e6, got %v", c.Backoff.Multiplier)
	}
	if c.Backoff.Max < c.Backoff.Base {
		bad(KeyBackoffMax, "must be at least backoff.base (%s), got %s", c.Backoff.Base, c.Backoff.Max)
	}
	if !(c.Backoff.Jitter >= 0 && c.Backoff.Jitter <= 1) {
		bad(KeyBackoffJitter, "must be between 0 and 1, got %v", c.Backoff.Jitter)
	}
}

// routeProblems checks each route's patterns, send timeout and delay level.
func (c Config) routeProblems(bad reporter) {
	for i, r := range c.Routes {
		key := fmt.Sprintf("%s[%d]", KeyRoutes, i)
		if r.Topic == "" {
			bad(key+".topic", "must not be empty (use \"*\" for any topic)")
		} else if _, err := path.Match(r.Topic, ""); err != nil {
			bad(key+".topic", "invalid pattern %q: %v", r.Topic, err)
		}
		if _, err := path.Match(r.Tag, ""); err != nil || r.Tag == "" {
			bad(key+".tag", "invalid pattern %q (use \"*\" for any tag)", r.Tag)
		}
		if r.SendTimeout < 0 {
			bad(key+".send_timeout", "must be >= 0, got %s", r.SendTimeout)
		}
		between(bad, key+".delay_level", r.DelayLevel, 0, MaxDelayLevel)
	}
}

// httpLogProblems checks the HTTP listener, its tokens and hosts, and logging.
func (c Config) httpLogProblems(bad reporter) {
	if c.HTTP.Addr != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
			bad(KeyHTTPAddr, "must be [host]:port, got %q", c.HTTP.Addr)
		}
	}
	checkToken(KeyHTTPAdminToken, c.HTTP.AdminToken, bad)
	checkToken(KeyHTTPReadToken, c.HTTP.ReadToken, bad)
	if c.HTTP.MaxConnections < 1 {
		bad(KeyHTTPMaxConnections, "must be at least 1, got %d", c.HTTP.MaxConnections)
	}
	for _, h := range c.HTTP.Hosts {
		if h == "" || strings.ContainsAny(h, ":/ ") {
			bad(KeyHTTPHosts, "must be host names without port or scheme, got %q", h)
		}
	}
	if _, err := zerolog.ParseLevel(c.Log.Level); err != nil || c.Log.Level == "" {
		bad(KeyLogLevel, "must be one of trace, debug, info, warn, error, fatal, panic, disabled; got %q", c.Log.Level)
	}
	switch c.Log.Format {
	case LogFormatAuto, LogFormatJSON, LogFormatConsole:
	default:
		bad(KeyLogFormat, "must be %q or %q, got %q", LogFormatJSON, LogFormatConsole, c.Log.Format)
	}
}

func positive(bad func(string, string, ...any), key string, d time.Duration) {
	if d <= 0 {
		bad(key, "must be a positive duration, got %s", d)
	}
}

func between(bad func(string, string, ...any), key string, n, lo, hi int) {
	if n < lo || n > hi {
		bad(key, "must be between %d and %d, got %d", lo, hi, n)
	}
}

func hostPort(addr string) error {
	if strings.Contains(addr, "@") || strings.Contains(addr, "://") {
		// A URL (redis://user:password@host:port/0): the password is never echoed.
		return fmt.Errorf("must be host:port, not a URL or user@host (the password goes in its own key, e.g. "+
			"redis.password / OUTBOX_REDIS_PASSWORD), got %q", maskUserinfo(addr))
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("must be host:port, got %q", addr)
	}
	return nil
}

// maskUserinfo replaces what comes before the last "@" of an address (after its scheme) by
// Mask: "redis://:pw@h:6379/0" -> "redis://***@h:6379/0".
func maskUserinfo(addr string) string {
	at := strings.LastIndex(addr, "@")
	if at < 0 {
		return addr
	}
	start := 0
	if i := strings.Index(addr, "://"); i >= 0 && i < at {
		start = i + 3
	}
	return addr[:start] + Mask + addr[at:]
}

// nameServer accepts host:port, or an http(s) URL for name-server discovery endpoints.
func nameServer(ns string) error {
	if strings.HasPrefix(ns, "http://") || strings.HasPrefix(ns, "https://") {
		if u, err := url.Parse(ns); err != nil || u.Host == "" {
			return fmt.Errorf("must be host:port or an http(s) URL, got %q", maskUserinfo(ns))
		}
		return nil
	}
	return hostPort(ns)
}

// maxNamespaceLen bounds rocketmq.namespace: "namespace%topic" must stay within RocketMQ's
// 127-character topic names.
const maxNamespaceLen = 64

// validNamespace reports whether ns is a RocketMQ namespace: letters, digits, '-' and '_'.
func validNamespace(ns string) bool {
	if len(ns) > maxNamespaceLen {
		return false
	}
	for _, r := range ns {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// problems reports rocketmq.tls settings that would not do what they say.
func (t RocketMQTLS) problems(bad func(key, format string, args ...any)) {
	set := []struct {
		key string
		on  bool
	}{{KeyRocketMQTLSCAFile, t.CAFile != ""}, {KeyRocketMQTLSServerName, t.ServerName != ""},
		{KeyRocketMQTLSCertFile, t.CertFile != ""}, {KeyRocketMQTLSKeyFile, t.KeyFile != ""}}
	if !t.Enable {
		if t.InsecureSkipVerify {
			bad(KeyRocketMQTLSInsecureSkipVerify, "is set but rocketmq.tls.enable is false: TLS is off")
		}
		for _, s := range set {
			if s.on {
				bad(s.key, "is set but rocketmq.tls.enable is false: TLS is off")
			}
		}
		return
	}
	if t.InsecureSkipVerify {
		for _, s := range set {
			if s.on {
				bad(s.key, "cannot be used with rocketmq.tls.insecure_skip_verify: true (the client's own TLS verifies nothing and presents no certificate): remove it, or remove insecure_skip_verify to verify the server")
			}
		}
		return
	}
	switch {
	case runtime.GOOS != "linux":
		bad(KeyRocketMQTLSEnable, "verified TLS to RocketMQ needs Linux (the relay's verifying bridge accepts only its own connections, read from /proc); on %s set rocketmq.tls.insecure_skip_verify: true or leave TLS off", runtime.GOOS)
	case t.CertFile != "" && t.KeyFile == "":
		bad(KeyRocketMQTLSKeyFile, "required with rocketmq.tls.cert_file")
	case t.KeyFile != "" && t.CertFile == "":
		bad(KeyRocketMQTLSCertFile, "required with rocketmq.tls.key_file")
	default:
		var ke *KeyError
		if _, err := t.ClientConfig(); errors.As(err, &ke) {
			bad(ke.Key, "%v", ke.Err)
		}
	}
}

// groupName is RocketMQ's rule for group names (Validators.checkGroup): letters, digits,
// '%', '|', '_' and '-', at most 255 characters.
var groupName = regexp.MustCompile(`^[%|a-zA-Z0-9_-]{1,255}$`)

// checkGroupProblems checks rocketmq.transaction_check_groups: valid, distinct names, none
// of them a group the relay sends with (a plain producer of a check group would receive
// check-backs it cannot answer, and the broker would spend checks on it).
func (c Config) checkGroupProblems() []problem {
	var out []problem
	seen := map[string]bool{}
	sending := map[string]string{c.RocketMQ.Group: KeyRocketMQGroup}
	for i, r := range c.Routes {
		if r.Group != "" {
			sending[r.Group] = fmt.Sprintf("%s[%d].group", KeyRoutes, i)
		}
	}
	if len(c.RocketMQ.TransactionCheckGroups) > 0 {
		if c.RocketMQ.Namespace != "" {
			out = append(out, problem{KeyRocketMQTransactionCheckGroups, "cannot be used with rocketmq.namespace yet: halves and check groups through a namespace are untested"})
		}
	}
	if len(c.RocketMQ.TransactionCheckGroups) > 0 && len(c.RocketMQ.TransactionCheckSecrets) == 0 {
		out = append(out, problem{KeyRocketMQTransactionCheckSecrets, "required with rocketmq.transaction_check_groups: the responder acts only on signed halves (docs/security.md)"})
	}
	for i, s := range c.RocketMQ.TransactionCheckSecrets {
		if len(s) < 16 {
			out = append(out, problem{fmt.Sprintf("%s[%d]", KeyRocketMQTransactionCheckSecrets, i), fmt.Sprintf("must be at least 16 bytes, got %d", len(s))})
		}
	}
	if len(c.RocketMQ.TransactionCheckGroups) > 0 && len(c.EffectiveDatabases()) > 1 {
		out = append(out, problem{KeyRocketMQTransactionCheckGroups, "needs a single database: a half names its table, not its database"})
	}
	for i, g := range c.RocketMQ.TransactionCheckGroups {
		key := fmt.Sprintf("%s[%d]", KeyRocketMQTransactionCheckGroups, i)
		switch {
		case !groupName.MatchString(g):
			out = append(out, problem{key, fmt.Sprintf("must be a RocketMQ group name (letters, digits, %%|_-, at most 255), got %q", g)})
		case seen[g]:
			out = append(out, problem{key, fmt.Sprintf("%q is listed twice", g)})
		case sending[g] != "":
			out = append(out, problem{key, fmt.Sprintf("%q is also the producer group of %s; a check group must be used only for transactional messages", g, sending[g])})
		}
		seen[g] = true
	}
	return out
}
