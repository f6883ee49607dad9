// SPDX-License-Identifier: Apache-2.0

package config

import (
	"time"

	"github.com/spf13/viper"
)

// Keys of the configuration, as written in YAML (dotted paths) and, upper-cased with "."
// replaced by "_" and the OUTBOX_ prefix, as environment variables.
const (
	KeyMySQLDSN    = "mysql.dsn"
	KeyMySQLTable  = "mysql.table"
	KeyMySQLTables = "mysql.tables"
	// Every database pool's connection lifetime and idle time (the databases list's too).
	KeyMySQLConnMaxLifetime = "mysql.conn_max_lifetime"
	KeyMySQLConnMaxIdleTime = "mysql.conn_max_idle_time"

	// KeyDatabases lists several databases, each {name, dsn, tables}; in the environment,
	// OUTBOX_DATABASES is a JSON array of such objects.
	KeyDatabases = "databases"

	KeyRedisAddr     = "redis.addr"
	KeyRedisPassword = "redis.password"
	KeyRedisDB       = "redis.db"
	// Highly available Redis: Sentinel (addrs + master_name) or Cluster (addrs + cluster).
	KeyRedisAddrs            = "redis.addrs"
	KeyRedisMasterName       = "redis.master_name"
	KeyRedisSentinelPassword = "redis.sentinel_password"
	KeyRedisUsername         = "redis.username"
	KeyRedisCluster          = "redis.cluster"

	KeyRocketMQNameServers = "rocketmq.nameservers"
	KeyRocketMQAccessKey   = "rocketmq.access_key"
	KeyRocketMQSecretKey   = "rocketmq.secret_key"
	KeyRocketMQGroup       = "rocketmq.group"
	KeyRocketMQSendTimeout = "rocketmq.send_timeout"
	KeyRocketMQNamespace   = "rocketmq.namespace"
	// TLS to name servers and brokers (or a 5.x proxy's remoting port).
	KeyRocketMQTLSEnable             = "rocketmq.tls.enable"
	KeyRocketMQTLSInsecureSkipVerify = "rocketmq.tls.insecure_skip_verify"
	KeyRocketMQTLSCAFile             = "rocketmq.tls.ca_file"
	KeyRocketMQTLSServerName         = "rocketmq.tls.server_name"
	KeyRocketMQTLSCertFile           = "rocketmq.tls.cert_file"
	KeyRocketMQTLSKeyFile            = "rocketmq.tls.key_file"
	// KeyRocketMQRequireReplication makes a send stored without replication a failure.
	KeyRocketMQRequireReplication = "rocketmq.require_replication"
	// KeyRocketMQTransactionCheckGroups lists the producer groups whose transactional
	// check-backs the relay answers from the outbox table.
	KeyRocketMQTransactionCheckGroups = "rocketmq.transaction_check_groups"
	// KeyRocketMQTransactionCheckSecrets lists the keys of the halves' signatures: the
	// responder acts only on halves signed with one of them.
	KeyRocketMQTransactionCheckSecrets = "rocketmq.transaction_check_secrets"
	// KeyRocketMQTransactionCheckFence makes the responder fence the msg_id of a signed
	// half whose row is absent and whose writer is not ours.
	KeyRocketMQTransactionCheckFence = "rocketmq.transaction_check_fence"

	KeyRelayPollInterval    = "relay.poll_interval"
	KeyRelayBatchSize       = "relay.batch_size"
	KeyRelayConcurrency     = "relay.concurrency"
	KeyRelayBatchSend       = "relay.batch_send"
	KeyRelayNudge           = "relay.nudge"
	KeyRelayUnrouted        = "relay.unrouted"
	KeyRelayMaxBodyBytes    = "relay.max_body_bytes"
	KeyRelayShutdownTimeout = "relay.shutdown_timeout"
	KeyRelayPurgeRetention  = "relay.purge_retention"
	KeyRelayPurgeInterval   = "relay.purge_interval"
	KeyRelayPartitions      = "relay.partitions"
	// KeyRelayMemoryLimit is the process's memory limit in bytes, from which the bodies'
	// budget and GOMEMLIMIT are derived.
	KeyRelayMemoryLimit = "relay.memory_limit"

	// Keys of the broker audit (Audit).
	KeyAuditEnabled   = "audit.enabled"
	KeyAuditMinAge    = "audit.min_age"
	KeyAuditMaxAge    = "audit.max_age"
	KeyAuditRate      = "audit.rate"
	KeyAuditBatchSize = "audit.batch_size"

	KeyLockTTL = "lock.ttl"
	KeyLockKey = "lock.key"
	// KeyLockRedlockAddrs lists independent Redis masters holding the lock as a Redlock quorum.
	KeyLockRedlockAddrs = "lock.redlock_addrs"

	KeyBackoffBase       = "backoff.base"
	KeyBackoffMultiplier = "backoff.multiplier"
	KeyBackoffMax        = "backoff.max"
	KeyBackoffJitter     = "backoff.jitter"

	KeyRoutes = "routes"

	KeyHTTPAddr           = "http.addr"
	KeyHTTPAdminToken     = "http.admin_token"
	KeyHTTPReadToken      = "http.read_token"
	KeyHTTPHosts          = "http.hosts"
	KeyHTTPMaxConnections = "http.max_connections"

	KeyLogLevel  = "log.level"
	KeyLogFormat = "log.format"
)

// EnvPrefix is the prefix of every environment variable read by the configuration.
const EnvPrefix = "OUTBOX"

// defaults lists every key with its default, in documentation order. A key missing here is
// unknown and rejected by Load.
var defaults = []struct {
	key string
	val any
}{
	{KeyMySQLDSN, ""}, // required: Config.problems
	{KeyMySQLTable, "local_message"},
	{KeyMySQLTables, []string{}},
	{KeyMySQLConnMaxLifetime, 5 * time.Minute},
	{KeyMySQLConnMaxIdleTime, time.Minute},
	{KeyDatabases, []any{}},
	{KeyRedisAddr, "127.0.0.1:6379"},
	{KeyRedisPassword, ""},
	{KeyRedisDB, 0},
	{KeyRedisAddrs, []string{}},
	{KeyRedisMasterName, ""},
	{KeyRedisSentinelPassword, ""},
	{KeyRedisUsername, ""},
	{KeyRedisCluster, false},
	{KeyRocketMQNameServers, []string{"127.0.0.1:9876"}},
	{KeyRocketMQAccessKey, ""},
	{KeyRocketMQSecretKey, ""},
	{KeyRocketMQGroup, "outbox-relay"},
	{KeyRocketMQSendTimeout, 3 * time.Second},
	{KeyRocketMQNamespace, ""},
	{KeyRocketMQTLSEnable, false},
	{KeyRocketMQTLSInsecureSkipVerify, false},
	{KeyRocketMQTLSCAFile, ""},
	{KeyRocketMQTLSServerName, ""},
	{KeyRocketMQTLSCertFile, ""},
	{KeyRocketMQTLSKeyFile, ""},
	{KeyRocketMQRequireReplication, false},
	{KeyRocketMQTransactionCheckGroups, []string{}},
	{KeyRocketMQTransactionCheckSecrets, []string{}},
	{KeyRocketMQTransactionCheckFence, false},
	{KeyRelayPollInterval, time.Second},
	{KeyRelayBatchSize, 500},
	{KeyRelayConcurrency, 16},
	{KeyRelayBatchSend, true},
	{KeyRelayNudge, true},
	{KeyRelayUnrouted, UnroutedDefault},
	{KeyRelayMaxBodyBytes, 4 << 20},
	{KeyRelayShutdownTimeout, 15 * time.Second},
	{KeyRelayPurgeRetention, time.Duration(0)},
	{KeyRelayPurgeInterval, 10 * time.Minute},
	{KeyRelayPartitions, 1},
	{KeyRelayMemoryLimit, 0},
	{KeyAuditEnabled, true},
	{KeyAuditMinAge, time.Minute},
	{KeyAuditMaxAge, 24 * time.Hour},
	{KeyAuditRate, 200.0},
	{KeyAuditBatchSize, 100},
	{KeyLockTTL, 2 * time.Second},
	{KeyLockKey, "outbox-relay:lock:{db}:{table}"},
	{KeyLockRedlockAddrs, []string{}},
	{KeyBackoffBase, time.Second},
	{KeyBackoffMultiplier, 2.0},
	{KeyBackoffMax, time.Hour},
	{KeyBackoffJitter, 0.0},
	{KeyRoutes, []any{}},
	{KeyHTTPAddr, ":9464"},
	{KeyHTTPAdminToken, ""},
	{KeyHTTPReadToken, ""},
	{KeyHTTPHosts, []string{}},
	{KeyHTTPMaxConnections, 1024},
	{KeyLogLevel, "info"},
	{KeyLogFormat, ""},
}

// defaultString returns the default of a string key.
func defaultString(key string) string {
	for _, d := range defaults {
		if d.key == key {
			s, _ := d.val.(string)
			return s
		}
	}
	return ""
}

// Keys returns every configuration key in documentation order.
func Keys() []string {
	out := make([]string, len(defaults))
	for i, d := range defaults {
		out[i] = d.key
	}
	return out
}

// EnvName returns the environment variable that sets key, e.g. OUTBOX_RELAY_BATCH_SIZE.
func EnvName(key string) string {
	return EnvPrefix + "_" + envReplacer.Replace(upper(key))
}

// NewViper returns a viper instance that knows every key with its default and reads OUTBOX_*
// environment variables. Bind flags to it with BindFlags, then call Load.
func NewViper() *viper.Viper {
	v := defaultsViper()
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(envReplacer)
	v.AutomaticEnv()
	return v
}

// defaultsViper knows every key with its default and reads nothing else.
func defaultsViper() *viper.Viper {
	v := viper.New()
	for _, d := range defaults {
		v.SetDefault(d.key, d.val)
	}
	return v
}
