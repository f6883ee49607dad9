// SPDX-License-Identifier: Apache-2.0

package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/viper"
)

// Load reads the YAML file at file (none when file is ""), on top of the defaults already in
// v (see NewViper), under the environment and any flags bound to v, then decodes and
// validates the result. Unknown keys in the file are errors, so a typo cannot silently fall
// back to a default. Every error names its key; the returned error lists them all.
func Load(v *viper.Viper, file string) (Config, error) {
	return loadFrom(v, file, os.Environ())
}

// loadFrom is Load checking the OUTBOX_ variables of environ.
func loadFrom(v *viper.Viper, file string, environ []string) (Config, error) {
	c, probs, err := decode(v, file, environ)
	if err != nil {
		return Config{}, err
	}
	// Report every problem at once: what could not be decoded, then what is invalid, except
	// the keys already reported (a value that failed to decode is also out of range).
	failed := map[string]bool{}
	for _, p := range probs {
		failed[p.key] = true
	}
	for _, p := range c.problems() {
		if !failed[p.key] {
			probs = append(probs, p)
		}
	}
	if len(probs) > 0 {
		errs := make([]error, len(probs))
		for i, p := range probs {
			errs[i] = p.err()
		}
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// decode reads file (if any), the OUTBOX_ variables of environ and v into a Config, and
// returns the values that could not be decoded; it does not validate the result.
func decode(v *viper.Viper, file string, environ []string) (Config, []problem, error) {
	if err := readConfigFile(v, file); err != nil {
		return Config{}, nil, err
	}
	d := decoder{v: v}
	for _, k := range v.AllKeys() {
		if !d.known(k) {
			d.fail(k, "unknown key")
		}
	}
	dbs := d.databases(environ)
	d.errs = append(d.errs, envProblems(environ, dbs)...)
	// The sections are decoded in this order so that problems are reported in it.
	c := Config{
		MySQL:     d.mysql(),
		Databases: dbs,
		Redis:     d.redis(),
		RocketMQ:  d.rocketMQ(),
		Relay:     d.relay(),
		Audit:     d.audit(),
		Lock:      d.lock(),
		HTTP:      d.http(),
		Log:       d.logging(),
	}
	c.Backoff.Base = d.duration(KeyBackoffBase)
	c.Backoff.Multiplier = d.float(KeyBackoffMultiplier)
	c.Backoff.Max = d.duration(KeyBackoffMax)
	c.Backoff.Jitter = d.float(KeyBackoffJitter)
	c.Routes = d.routes(c.RocketMQ)
	return c, d.errs, nil
}

// readConfigFile loads file into v; a file whose name does not end in .yaml or .yml is
// read as YAML all the same. No file means nothing to read.
func readConfigFile(v *viper.Viper, file string) error {
	if file == "" {
		return nil
	}
	v.SetConfigFile(file)
	if ext := strings.ToLower(filepath.Ext(file)); ext != ".yaml" && ext != ".yml" {
		v.SetConfigType("yaml")
	}
	if err := v.ReadInConfig(); err != nil {
		return fmt.Errorf("read config file %s: %w", file, err)
	}
	return nil
}

// mysql decodes the default database's mysql.* keys.
func (d *decoder) mysql() MySQL {
	return MySQL{
		DSN:    d.str(KeyMySQLDSN),
		Table:  d.str(KeyMySQLTable),
		Tables: d.list(KeyMySQLTables),

		ConnMaxLifetime: d.duration(KeyMySQLConnMaxLifetime),
		ConnMaxIdleTime: d.duration(KeyMySQLConnMaxIdleTime),
	}
}

// redis decodes the redis.* keys.
func (d *decoder) redis() Redis {
	return Redis{
		Addr:     d.str(KeyRedisAddr),
		Password: d.str(KeyRedisPassword),
		DB:       d.int(KeyRedisDB),

		Addrs:            d.list(KeyRedisAddrs),
		MasterName:       d.str(KeyRedisMasterName),
		SentinelPassword: d.str(KeyRedisSentinelPassword),
		Username:         d.str(KeyRedisUsername),
		Cluster:          d.bool(KeyRedisCluster),
	}
}

// rocketMQ decodes the rocketmq.* keys, its TLS settings included.
func (d *decoder) rocketMQ() RocketMQ {
	return RocketMQ{
		NameServers:             d.list(KeyRocketMQNameServers),
		AccessKey:               d.str(KeyRocketMQAccessKey),
		SecretKey:               d.str(KeyRocketMQSecretKey),
		Group:                   d.str(KeyRocketMQGroup),
		SendTimeout:             d.duration(KeyRocketMQSendTimeout),
		RequireReplication:      d.bool(KeyRocketMQRequireReplication),
		Namespace:               d.str(KeyRocketMQNamespace),
		TransactionCheckGroups:  d.list(KeyRocketMQTransactionCheckGroups),
		TransactionCheckSecrets: d.list(KeyRocketMQTransactionCheckSecrets),
		TransactionCheckFence:   d.bool(KeyRocketMQTransactionCheckFence),
		TLS: RocketMQTLS{
			Enable:             d.bool(KeyRocketMQTLSEnable),
			InsecureSkipVerify: d.bool(KeyRocketMQTLSInsecureSkipVerify),
			CAFile:             d.str(KeyRocketMQTLSCAFile),
			ServerName:         d.str(KeyRocketMQTLSServerName),
			CertFile:           d.str(KeyRocketMQTLSCertFile),
			KeyFile:            d.str(KeyRocketMQTLSKeyFile),
		},
	}
}

// relay decodes the relay.* keys; relay.unrouted is case-insensitive.
func (d *decoder) relay() Relay {
	return Relay{
		PollInterval:    d.duration(KeyRelayPollInterval),
		BatchSize:       d.int(KeyRelayBatchSize),
		Concurrency:     d.int(KeyRelayConcurrency),
		BatchSend:       d.bool(KeyRelayBatchSend),
		Nudge:           d.bool(KeyRelayNudge),
		Unrouted:        strings.ToLower(d.str(KeyRelayUnrouted)),
		MaxBodyBytes:    d.int(KeyRelayMaxBodyBytes),
		ShutdownTimeout: d.duration(KeyRelayShutdownTimeout),
		PurgeRetention:  d.duration(KeyRelayPurgeRetention),
		PurgeInterval:   d.duration(KeyRelayPurgeInterval),
		Partitions:      d.int(KeyRelayPartitions),
		MemoryLimit:     int64(d.int(KeyRelayMemoryLimit)),
	}
}

// audit decodes the audit.* keys.
func (d *decoder) audit() Audit {
	return Audit{
		Enabled:   d.bool(KeyAuditEnabled),
		MinAge:    d.duration(KeyAuditMinAge),
		MaxAge:    d.duration(KeyAuditMaxAge),
		Rate:      d.float(KeyAuditRate),
		BatchSize: d.int(KeyAuditBatchSize),
	}
}

// lock decodes the lock.* keys.
func (d *decoder) lock() Lock {
	return Lock{
		TTL: d.duration(KeyLockTTL),
		Key: d.str(KeyLockKey),

		RedlockAddrs: d.list(KeyLockRedlockAddrs),
	}
}

// http decodes the http.* keys.
func (d *decoder) http() HTTP {
	return HTTP{Addr: d.str(KeyHTTPAddr), AdminToken: d.str(KeyHTTPAdminToken), ReadToken: d.str(KeyHTTPReadToken),
		Hosts: d.list(KeyHTTPHosts), MaxConnections: d.int(KeyHTTPMaxConnections)}
}

// logging decodes the log.* keys, case-insensitively; log.format "auto" means
// LogFormatAuto.
func (d *decoder) logging() Log {
	l := Log{
		Level:  strings.ToLower(d.str(KeyLogLevel)),
		Format: strings.ToLower(d.str(KeyLogFormat)),
	}
	if l.Format == "auto" {
		l.Format = LogFormatAuto
	}
	return l
}

// decoder reads raw values from viper strictly: viper's own getters turn "abc" into 0 for an
// int or a duration, which would hide mistakes.
type decoder struct {
	v    *viper.Viper
	errs []problem
}

func (d *decoder) fail(key, format string, args ...any) {
	d.errs = append(d.errs, problem{key, fmt.Sprintf(format, args...)})
}

func (d *decoder) known(k string) bool {
	for _, def := range defaults {
		if k == def.key {
			return true
		}
	}
	return false
}

func (d *decoder) str(key string) string {
	switch x := d.v.Get(key).(type) {
	case nil:
		return ""
	case string:
		return strings.TrimSpace(x)
	case int, int64, float64, bool:
		return fmt.Sprint(x)
	default:
		d.fail(key, "must be a string, got %T", x)
		return ""
	}
}

func (d *decoder) int(key string) int {
	switch x := d.v.Get(key).(type) {
	case int:
		return x
	case int64:
		return int(x)
	case uint64:
		if x > math.MaxInt32 {
			d.fail(key, "too large: %d", x)
			return 0
		}
		return int(x)
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > math.MaxInt32 {
			d.fail(key, "must be a whole number, got %v", x)
			return 0
		}
		return int(x)
	case string:
		n, err := strconv.Atoi(strings.TrimSpace(x))
		if err != nil {
			d.fail(key, "must be a whole number, got %q", x)
		}
		return n
	default:
		d.fail(key, "must be a whole number, got %v (%T)", x, x)
		return 0
	}
}

func (d *decoder) float(key string) float64 {
	switch x := d.v.Get(key).(type) {
	case float64:
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			d.fail(key, "must be a number, got %q", x)
		}
		return f
	default:
		d.fail(key, "must be a number, got %v (%T)", x, x)
		return 0
	}
}

func (d *decoder) bool(key string) bool {
	switch x := d.v.Get(key).(type) {
	case bool:
		return x
	case string:
		b, err := strconv.ParseBool(strings.TrimSpace(x))
		if err != nil {
			d.fail(key, "must be true or false, got %q", x)
		}
		return b
	default:
		d.fail(key, "must be true or false, got %v (%T)", x, x)
		return false
	}
}

func (d *decoder) duration(key string) time.Duration {
	dur, err := durationOf(d.v.Get(key))
	if err != nil {
		d.fail(key, "%v", err)
	}
	return dur
}

// durationOf accepts what ParseDuration accepts, a time.Duration (defaults, flags) and the
// bare number 0. A bare non-zero number is rejected: "10" could mean seconds or nanoseconds.
func durationOf(raw any) (time.Duration, error) {
	switch x := raw.(type) {
	case time.Duration:
		return x, nil
	case int:
		if x == 0 {
			return 0, nil
		}
	case int64:
		if x == 0 {
			return 0, nil
		}
	case float64:
		if x == 0 {
			return 0, nil
		}
	case string:
		return ParseDuration(x)
	}
	return 0, fmt.Errorf("%s, got %v", durationHint, raw)
}

// list accepts a YAML list or a string separated by commas (environment, flags); semicolons
// separate too, as in RocketMQ's own name-server strings. Blank entries are dropped.
func (d *decoder) list(key string) []string {
	var parts []string
	switch x := d.v.Get(key).(type) {
	case nil:
	case string:
		parts = strings.FieldsFunc(x, func(r rune) bool { return r == ',' || r == ';' })
	case []string:
		parts = x
	case []any:
		for i, e := range x {
			s, ok := e.(string)
			if !ok {
				d.fail(fmt.Sprintf("%s[%d]", key, i), "must be a string, got %v (%T)", e, e)
				continue
			}
			parts = append(parts, s)
		}
	default:
		d.fail(key, "must be a list of strings, got %v (%T)", x, x)
	}
	out := make([]string, 0, len(parts))
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

var routeFields = []string{"topic", "tag", "group", "send_timeout", "ordered", "delay_level"}

// routes decodes the routes list; in the environment (OUTBOX_ROUTES) it is a JSON array of
// objects with the same fields. Unset fields take the defaults of rocketmq.
func (d *decoder) routes(mq RocketMQ) []Route {
	items := d.objects(KeyRoutes, "{topic, tag, group, send_timeout, ordered, delay_level}")
	out := make([]Route, 0, len(items))
	for i, item := range items {
		key := fmt.Sprintf("%s[%d]", KeyRoutes, i)
		sd, ok := d.object(key, item, routeFields)
		if !ok {
			continue
		}
		sub := sd.v
		r := Route{Tag: "*", Group: mq.Group, SendTimeout: mq.SendTimeout}
		if sub.IsSet("topic") {
			r.Topic = sd.str("topic")
		}
		if sub.IsSet("tag") {
			r.Tag = sd.str("tag")
		}
		if g := sd.str("group"); g != "" {
			r.Group = g
		}
		if sub.IsSet("send_timeout") {
			if t := sd.duration("send_timeout"); t != 0 {
				r.SendTimeout = t // 0 keeps rocketmq.send_timeout
			}
		}
		if sub.IsSet("ordered") {
			r.Ordered = sd.bool("ordered")
		}
		if sub.IsSet("delay_level") {
			r.DelayLevel = sd.int("delay_level")
		}
		d.adopt(key, sd)
		out = append(out, r)
	}
	return out
}

// objects reads key as a list of objects (maps); in the environment it is a JSON array of
// objects. what describes an object's fields for the error message.
func (d *decoder) objects(key, what string) []any {
	raw := d.v.Get(key)
	if s, ok := raw.(string); ok {
		if strings.TrimSpace(s) == "" {
			return nil
		}
		var items []any
		if err := json.Unmarshal([]byte(s), &items); err != nil {
			d.fail(key, "from the environment must be a JSON array of objects: %v", err)
			return nil
		}
		return items
	}
	switch x := raw.(type) {
	case nil:
		return nil
	case []any:
		return x
	case []map[string]any:
		items := make([]any, len(x))
		for i, e := range x {
			items[i] = e
		}
		return items
	default:
		d.fail(key, "must be a list of %s, got %T", what, raw)
		return nil
	}
}

// object returns a decoder of item, one element of a list of objects at key (e.g.
// routes[2]), whose fields must be among fields; ok is false when item is no object.
func (d *decoder) object(key string, item any, fields []string) (sd *decoder, ok bool) {
	m, ok := item.(map[string]any)
	if !ok {
		d.fail(key, "must be an object with %s; got %v (%T)", strings.Join(fields, ", "), item, item)
		return nil, false
	}
	sub := viper.New()
	for k, val := range m {
		k = strings.ToLower(k)
		if !slices.Contains(fields, k) {
			d.fail(key+"."+k, "unknown key (known: %s)", strings.Join(fields, ", "))
			continue
		}
		sub.Set(k, val)
	}
	return &decoder{v: sub}, true
}

// adopt takes the problems of sd, the decoder of the object at key, naming them under key.
func (d *decoder) adopt(key string, sd *decoder) {
	for _, p := range sd.errs {
		d.errs = append(d.errs, problem{key + "." + p.key, p.msg})
	}
}

var databaseFields = []string{"name", "dsn", "tables"}

// databases decodes the databases list. A DSN in the environment variable of an entry's name
// (DatabaseEnvName) wins over the file's, as the environment wins over the file everywhere;
// an entry without tables relays the default table (mysql.table's default).
func (d *decoder) databases(environ []string) []Database {
	env := map[string]string{}
	for _, kv := range environ {
		if name, val, ok := strings.Cut(kv, "="); ok {
			env[name] = val
		}
	}
	var out []Database
	for i, item := range d.objects(KeyDatabases, "{name, dsn, tables}") {
		key := fmt.Sprintf("%s[%d]", KeyDatabases, i)
		sd, ok := d.object(key, item, databaseFields)
		if !ok {
			continue
		}
		db := Database{Name: sd.str("name"), DSN: sd.str("dsn"), Tables: sd.list("tables")}
		if dsn, ok := env[DatabaseEnvName(db.Name)]; ok && db.Name != "" {
			db.DSN = strings.TrimSpace(dsn)
		}
		if !sd.v.IsSet("tables") {
			db.Tables = []string{defaultString(KeyMySQLTable)}
		}
		d.adopt(key, sd)
		out = append(out, db)
	}
	return out
}
