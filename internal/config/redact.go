// SPDX-License-Identifier: Apache-2.0

package config

import (
	"bytes"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Mask replaces a secret in Redacted output.
const Mask = "*****"

// Redacted returns a copy of c whose secrets are replaced by Mask: the password in
// mysql.dsn and in every databases[].dsn, redis.password, redis.sentinel_password,
// rocketmq.secret_key and http.admin_token. Empty secrets stay empty, so the output
// still shows whether one is set.
func (c Config) Redacted() Config {
	c.MySQL.DSN = RedactDSN(c.MySQL.DSN)
	if c.Redis.Password != "" {
		c.Redis.Password = Mask
	}
	if c.Redis.SentinelPassword != "" {
		c.Redis.SentinelPassword = Mask
	}
	c.Redis.Addrs = slices.Clone(c.Redis.Addrs)
	c.Lock.RedlockAddrs = slices.Clone(c.Lock.RedlockAddrs)
	if c.RocketMQ.SecretKey != "" {
		c.RocketMQ.SecretKey = Mask
	}
	if c.RocketMQ.TransactionCheckSecrets != nil {
		masked := make([]string, len(c.RocketMQ.TransactionCheckSecrets))
		for i := range masked {
			masked[i] = Mask
		}
		c.RocketMQ.TransactionCheckSecrets = masked
	}
	if c.HTTP.AdminToken != "" {
		c.HTTP.AdminToken = Mask
	}
	if c.HTTP.ReadToken != "" {
		c.HTTP.ReadToken = Mask
	}
	c.HTTP.Hosts = slices.Clone(c.HTTP.Hosts)
	c.MySQL.Tables = append([]string(nil), c.MySQL.Tables...)
	if c.Databases != nil {
		dbs := make([]Database, len(c.Databases))
		for i, d := range c.Databases {
			dbs[i] = Database{Name: d.Name, DSN: RedactDSN(d.DSN), Tables: append([]string(nil), d.Tables...)}
		}
		c.Databases = dbs
	}
	c.RocketMQ.NameServers = append([]string(nil), c.RocketMQ.NameServers...)
	c.RocketMQ.TransactionCheckGroups = slices.Clone(c.RocketMQ.TransactionCheckGroups)
	c.Routes = append([]Route(nil), c.Routes...)
	return c
}

// RedactDSN masks the password of a go-sql-driver/mysql DSN
// ([user[:password]@][net[(addr)]]/dbname[?params]), keeping the rest as written.
// A string with no "/" is not a DSN the driver accepts; it is masked whole.
func RedactDSN(dsn string) string {
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		if dsn == "" {
			return ""
		}
		return Mask
	}
	// The driver splits user info at the last "@" before the last "/".
	at := strings.LastIndex(dsn[:slash], "@")
	if at < 0 {
		return dsn
	}
	colon := strings.Index(dsn[:at], ":")
	if colon < 0 || colon == at-1 {
		return dsn // no password, or an empty one
	}
	return dsn[:colon+1] + Mask + dsn[at:]
}

// String returns the redacted configuration as YAML.
func (c Config) String() string {
	b, err := c.YAML()
	if err != nil {
		return "config: " + err.Error()
	}
	return string(b)
}

// YAML returns the redacted configuration as a YAML document that Load reads back (with the
// secrets masked), keys in documentation order.
func (c Config) YAML() ([]byte, error) {
	r := c.Redacted()
	routes := make([]yamlRoute, len(r.Routes))
	for i, rt := range r.Routes {
		routes[i] = yamlRoute{rt.Topic, rt.Tag, rt.Group, fmtDuration(rt.SendTimeout), rt.Ordered, rt.DelayLevel}
	}
	format := r.Log.Format
	if format == LogFormatAuto {
		format = "auto"
	}
	dbs := make([]yamlDatabase, len(r.Databases))
	for i, d := range r.Databases {
		dbs[i] = yamlDatabase{d.Name, d.DSN, nonNil(d.Tables)}
	}
	doc := yamlConfig{
		MySQL: yamlMySQL{r.MySQL.DSN, r.MySQL.Table, nonNil(r.MySQL.Tables),
			fmtDuration(r.MySQL.ConnMaxLifetime), fmtDuration(r.MySQL.ConnMaxIdleTime)},
		Databases: dbs,
		Redis: yamlRedis{r.Redis.Addr, r.Redis.Password, r.Redis.DB,
			nonNil(r.Redis.Addrs), r.Redis.MasterName, r.Redis.SentinelPassword, r.Redis.Username, r.Redis.Cluster},
		RocketMQ: yamlRocketMQ{nonNil(r.RocketMQ.NameServers), r.RocketMQ.AccessKey, r.RocketMQ.SecretKey,
			r.RocketMQ.Group, fmtDuration(r.RocketMQ.SendTimeout), nonNil(r.RocketMQ.TransactionCheckGroups),
			nonNil(r.RocketMQ.TransactionCheckSecrets), r.RocketMQ.TransactionCheckFence},
		Relay: yamlRelay{fmtDuration(r.Relay.PollInterval), r.Relay.BatchSize, r.Relay.Concurrency, r.Relay.BatchSend,
			r.Relay.Nudge, r.Relay.Unrouted, r.Relay.MaxBodyBytes, fmtDuration(r.Relay.ShutdownTimeout),
			fmtDuration(r.Relay.PurgeRetention), fmtDuration(r.Relay.PurgeInterval)},
		Lock:    yamlLock{fmtDuration(r.Lock.TTL), r.Lock.Key, nonNil(r.Lock.RedlockAddrs)},
		Backoff: yamlBackoff{fmtDuration(r.Backoff.Base), r.Backoff.Multiplier, fmtDuration(r.Backoff.Max), r.Backoff.Jitter},
		Routes:  routes,
		HTTP:    yamlHTTP{r.HTTP.Addr, r.HTTP.AdminToken, r.HTTP.ReadToken, nonNil(r.HTTP.Hosts), r.HTTP.MaxConnections},
		Log:     yamlLog{r.Log.Level, format},
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// GoString keeps %#v from printing secrets.
func (c Config) GoString() string { return c.String() }

// fmtDuration drops time.Duration.String's zero units: 1h instead of 1h0m0s.
func fmtDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type yamlConfig struct {
	MySQL     yamlMySQL      `yaml:"mysql"`
	Databases []yamlDatabase `yaml:"databases"`
	Redis     yamlRedis      `yaml:"redis"`
	RocketMQ  yamlRocketMQ   `yaml:"rocketmq"`
	Relay     yamlRelay      `yaml:"relay"`
	Lock      yamlLock       `yaml:"lock"`
	Backoff   yamlBackoff    `yaml:"backoff"`
	Routes    []yamlRoute    `yaml:"routes"`
	HTTP      yamlHTTP       `yaml:"http"`
	Log       yamlLog        `yaml:"log"`
}

type yamlMySQL struct {
	DSN    string   `yaml:"dsn"`
	Table  string   `yaml:"table"`
	Tables []string `yaml:"tables"`

	ConnMaxLifetime string `yaml:"conn_max_lifetime"`
	ConnMaxIdleTime string `yaml:"conn_max_idle_time"`
}

type yamlDatabase struct {
	Name   string   `yaml:"name"`
	DSN    string   `yaml:"dsn"`
	Tables []string `yaml:"tables"`
}

type yamlRedis struct {
	Addr     string `yaml:"addr"`
	Password string `yaml:"password"`
	DB       int    `yaml:"db"`

	Addrs            []string `yaml:"addrs"`
	MasterName       string   `yaml:"master_name"`
	SentinelPassword string   `yaml:"sentinel_password"`
	Username         string   `yaml:"username"`
	Cluster          bool     `yaml:"cluster"`
}

type yamlRocketMQ struct {
	NameServers []string `yaml:"nameservers"`
	AccessKey   string   `yaml:"access_key"`
	SecretKey   string   `yaml:"secret_key"`
	Group       string   `yaml:"group"`
	SendTimeout string   `yaml:"send_timeout"`
	// TransactionCheckGroups is rocketmq.transaction_check_groups.
	TransactionCheckGroups []string `yaml:"transaction_check_groups"`
	// TransactionCheckSecrets is rocketmq.transaction_check_secrets (masked).
	TransactionCheckSecrets []string `yaml:"transaction_check_secrets"`
	// TransactionCheckFence is rocketmq.transaction_check_fence.
	TransactionCheckFence bool `yaml:"transaction_check_fence"`
}

type yamlRelay struct {
	PollInterval    string `yaml:"poll_interval"`
	BatchSize       int    `yaml:"batch_size"`
	Concurrency     int    `yaml:"concurrency"`
	BatchSend       bool   `yaml:"batch_send"`
	Nudge           bool   `yaml:"nudge"`
	Unrouted        string `yaml:"unrouted"`
	MaxBodyBytes    int    `yaml:"max_body_bytes"`
	ShutdownTimeout string `yaml:"shutdown_timeout"`
	PurgeRetention  string `yaml:"purge_retention"`
	PurgeInterval   string `yaml:"purge_interval"`
}

type yamlLock struct {
	TTL string `yaml:"ttl"`
	Key string `yaml:"key"`

	RedlockAddrs []string `yaml:"redlock_addrs"`
}

type yamlBackoff struct {
	Base       string  `yaml:"base"`
	Multiplier float64 `yaml:"multiplier"`
	Max        string  `yaml:"max"`
	Jitter     float64 `yaml:"jitter"`
}

type yamlRoute struct {
	Topic       string `yaml:"topic"`
	Tag         string `yaml:"tag"`
	Group       string `yaml:"group"`
	SendTimeout string `yaml:"send_timeout"`
	Ordered     bool   `yaml:"ordered"`
	DelayLevel  int    `yaml:"delay_level"`
}

type yamlHTTP struct {
	Addr           string   `yaml:"addr"`
	AdminToken     string   `yaml:"admin_token"`
	ReadToken      string   `yaml:"read_token"`
	Hosts          []string `yaml:"hosts"`
	MaxConnections int      `yaml:"max_connections"`
}

type yamlLog struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}
