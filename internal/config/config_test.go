// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/backoff"
)

// testDSN is the mysql.dsn load supplies when a test sets none.
const testDSN = "root:@tcp(127.0.0.1:3306)/test"

// load writes yaml (if not empty) to a temporary file and loads it with args as flags.
func load(t *testing.T, yaml string, args ...string) (Config, error) {
	t.Helper()
	v := NewViper()
	// mysql.dsn is required; tests of other keys get testDSN unless they set one.
	v.SetDefault(KeyMySQLDSN, testDSN)
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	if err := BindFlags(v, fs); err != nil {
		t.Fatal(err)
	}
	file := ""
	if yaml != "" {
		file = filepath.Join(t.TempDir(), "outbox-relay.yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return Load(v, file)
}

func mustLoad(t *testing.T, yaml string, args ...string) Config {
	t.Helper()
	c, err := load(t, yaml, args...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return c
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	want := Config{
		MySQL:    MySQL{DSN: testDSN, Table: "local_message", Tables: []string{}, ConnMaxLifetime: 5 * time.Minute, ConnMaxIdleTime: time.Minute},
		Redis:    Redis{Addr: "127.0.0.1:6379", Addrs: []string{}},
		RocketMQ: RocketMQ{NameServers: []string{"127.0.0.1:9876"}, Group: "outbox-relay", SendTimeout: 3 * time.Second, TransactionCheckGroups: []string{}, TransactionCheckSecrets: []string{}},
		Relay: Relay{
			PollInterval: time.Second, BatchSize: 500, Concurrency: 16, BatchSend: true, Nudge: true,
			Unrouted: "default", MaxBodyBytes: 4194304, ShutdownTimeout: 15 * time.Second,
			PurgeRetention: 0, PurgeInterval: 10 * time.Minute, Partitions: 1,
		},
		Audit:   Audit{Enabled: true, MinAge: time.Minute, MaxAge: 24 * time.Hour, Rate: 200, BatchSize: 100},
		Lock:    Lock{TTL: 2 * time.Second, Key: "outbox-relay:lock:{db}:{table}", RedlockAddrs: []string{}},
		Backoff: backoff.Default(),
		Routes:  []Route{},
		HTTP:    HTTP{Addr: ":9464", Hosts: []string{}, MaxConnections: 1024},
		Log:     Log{Level: "info", Format: LogFormatAuto},
	}
	got := mustLoad(t, "")
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults:\n got %s\nwant %s", got, want)
	}
	want.MySQL.DSN = "" // required: no default
	if !reflect.DeepEqual(Default(), want) {
		t.Fatal("Default() differs from Load with nothing but mysql.dsn set")
	}
	if got.Tables()[0] != "local_message" || len(got.Tables()) != 1 {
		t.Fatalf("Tables() = %v", got.Tables())
	}
	if got.LockKey("orders_outbox") != "outbox-relay:lock:127.0.0.1:3306/test:orders_outbox" {
		t.Fatalf("LockKey = %q", got.LockKey("orders_outbox"))
	}
	// Every documented key has a default and an environment name.
	for _, k := range Keys() {
		if !strings.HasPrefix(EnvName(k), "OUTBOX_") || strings.Contains(EnvName(k), ".") {
			t.Errorf("EnvName(%q) = %q", k, EnvName(k))
		}
	}
}

// Not parallel: uses the process environment.
func TestPrecedenceFileEnvFlag(t *testing.T) {
	file := "relay:\n  batch_size: 100\n  concurrency: 4\n  poll_interval: 250ms\nlog:\n  level: warn\n"

	c := mustLoad(t, file)
	if c.Relay.BatchSize != 100 || c.Relay.Concurrency != 4 || c.Relay.PollInterval != 250*time.Millisecond {
		t.Fatalf("file not applied: %+v", c.Relay)
	}

	t.Setenv("OUTBOX_RELAY_BATCH_SIZE", "200")
	t.Setenv("OUTBOX_LOG_LEVEL", "debug")
	c = mustLoad(t, file)
	if c.Relay.BatchSize != 200 || c.Log.Level != "debug" {
		t.Fatalf("env must beat file: batch %d level %s", c.Relay.BatchSize, c.Log.Level)
	}
	if c.Relay.Concurrency != 4 {
		t.Fatalf("file value lost when env sets a sibling: %d", c.Relay.Concurrency)
	}

	c = mustLoad(t, file, "--batch-size=300", "--poll-interval=2s")
	if c.Relay.BatchSize != 300 || c.Relay.PollInterval != 2*time.Second {
		t.Fatalf("flag must beat env and file: %+v", c.Relay)
	}
	if c.Log.Level != "debug" {
		t.Fatalf("unset flag must not override env: %s", c.Log.Level)
	}
}

func TestEnvLists(t *testing.T) {
	t.Setenv("OUTBOX_ROCKETMQ_NAMESERVERS", "ns1:9876, ns2:9876;ns3:9876")
	t.Setenv("OUTBOX_MYSQL_TABLES", "orders_outbox,payments_outbox")
	t.Setenv("OUTBOX_MYSQL_DSN", "app:s3cret@tcp(db:3306)/shop?parseTime=true")
	t.Setenv("OUTBOX_ROUTES", `[{"topic":"order-*","ordered":true,"send_timeout":"5s"},{"topic":"*","tag":"slow","delay_level":3}]`)
	c := mustLoad(t, "")
	if want := []string{"ns1:9876", "ns2:9876", "ns3:9876"}; !reflect.DeepEqual(c.RocketMQ.NameServers, want) {
		t.Fatalf("nameservers = %v, want %v", c.RocketMQ.NameServers, want)
	}
	if want := []string{"orders_outbox", "payments_outbox"}; !reflect.DeepEqual(c.Tables(), want) {
		t.Fatalf("tables = %v, want %v", c.Tables(), want)
	}
	if c.MySQL.DSN != "app:s3cret@tcp(db:3306)/shop?parseTime=true" {
		t.Fatalf("dsn = %q", c.MySQL.DSN)
	}
	want := []Route{
		{Topic: "order-*", Tag: "*", Group: "outbox-relay", SendTimeout: 5 * time.Second, Ordered: true},
		{Topic: "*", Tag: "slow", Group: "outbox-relay", SendTimeout: 3 * time.Second, DelayLevel: 3},
	}
	if !reflect.DeepEqual(c.Routes, want) {
		t.Fatalf("routes = %+v, want %+v", c.Routes, want)
	}
}

func TestFileListsAndRoutes(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `
mysql:
  tables: [a_outbox, b_outbox]
rocketmq:
  nameservers: ["10.0.0.1:9876", "10.0.0.2:9876"]
  group: shop
routes:
  - topic: order-*
    tag: created
    group: orders
    ordered: true
  - topic: "*"
`, "--nameservers=x:1,y:2")
	if !reflect.DeepEqual(c.RocketMQ.NameServers, []string{"x:1", "y:2"}) {
		t.Fatalf("flag list: %v", c.RocketMQ.NameServers)
	}
	if !reflect.DeepEqual(c.Tables(), []string{"a_outbox", "b_outbox"}) {
		t.Fatalf("tables: %v", c.Tables())
	}
	want := []Route{
		{Topic: "order-*", Tag: "created", Group: "orders", SendTimeout: 3 * time.Second, Ordered: true},
		{Topic: "*", Tag: "*", Group: "shop", SendTimeout: 3 * time.Second},
	}
	if !reflect.DeepEqual(c.Routes, want) {
		t.Fatalf("routes = %+v, want %+v", c.Routes, want)
	}
	if !want[0].Matches("order-paid", "created") || want[0].Matches("order-paid", "paid") || want[0].Matches("stock", "created") {
		t.Fatal("Route.Matches wrong")
	}
}

func TestInvalidValuesNameTheirKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		yaml string
		key  string
	}{
		{"mysql: {dsn: ''}", "mysql.dsn"},
		{"mysql: {dsn: 'not a dsn'}", "mysql.dsn"},
		{"mysql: {table: 'drop table x;'}", "mysql.table"},
		{"mysql: {table: '1abc'}", "mysql.table"},
		{"mysql: {table: " + strings.Repeat("a", 65) + "}", "mysql.table"},
		{"mysql: {tables: [ok_one, 'bad-name']}", "mysql.tables[1]"},
		{"mysql: {tables: [same, same]}", "mysql.tables[1]"},
		{"redis: {addr: localhost}", "redis.addr"},
		{"redis: {db: -1}", "redis.db"},
		{"redis: {db: two}", "redis.db"},
		{"rocketmq: {nameservers: []}", "rocketmq.nameservers"},
		{"rocketmq: {nameservers: [nohost]}", "rocketmq.nameservers[0]"},
		{"rocketmq: {access_key: ak}", "rocketmq.secret_key"},
		{"rocketmq: {group: ''}", "rocketmq.group"},
		{"rocketmq: {send_timeout: 3}", "rocketmq.send_timeout"},
		{"rocketmq: {send_timeout: 0s}", "rocketmq.send_timeout"},
		{"rocketmq: {namespace: 'MQ_INST%1'}", "rocketmq.namespace"},
		{"rocketmq: {namespace: " + strings.Repeat("n", 65) + "}", "rocketmq.namespace"},
		{"rocketmq: {tls: {server_name: mq.example}}", "rocketmq.tls.server_name"},
		{"rocketmq: {tls: {enable: true, ca_file: /nonexistent/ca.pem}}", "rocketmq.tls.ca_file"},
		{"rocketmq: {tls: {enable: true, ca_file: /etc/hostname}}", "rocketmq.tls.ca_file"},
		{"rocketmq: {tls: {enable: true, cert_file: /etc/cert.pem}}", "rocketmq.tls.key_file"},
		{"rocketmq: {tls: {enable: true, key_file: /etc/key.pem}}", "rocketmq.tls.cert_file"},
		{"rocketmq: {tls: {enable: true, cert_file: /nonexistent/c.pem, key_file: /nonexistent/k.pem}}", "rocketmq.tls.cert_file"},
		{"rocketmq: {tls: {enable: true, insecure_skip_verify: true, cert_file: /etc/cert.pem}}", "rocketmq.tls.cert_file"},
		{"rocketmq: {tls: {insecure_skip_verify: true}}", "rocketmq.tls.insecure_skip_verify"},
		{"rocketmq: {tls: {enable: true, insecure_skip_verify: true, ca_file: /etc/ca.pem}}", "rocketmq.tls.ca_file"},
		{"rocketmq: {tls: {enable: true, insecure_skip_verify: true, server_name: mq.example}}", "rocketmq.tls.server_name"},
		{"rocketmq: {tls: {enable: yes please}}", "rocketmq.tls.enable"},
		{"rocketmq: {tls: {verify: true}}", "rocketmq.tls.verify"},
		{"rocketmq: {transaction_check_groups: ['bad group']}", "rocketmq.transaction_check_groups[0]"},
		{"rocketmq: {transaction_check_groups: [tx, tx]}", "rocketmq.transaction_check_groups[1]"},
		{"rocketmq: {transaction_check_groups: [tx]}", "rocketmq.transaction_check_secrets"},
		{"rocketmq: {transaction_check_groups: [tx], transaction_check_secrets: [short]}", "rocketmq.transaction_check_secrets[0]"},
		{"rocketmq: {transaction_check_groups: [tx], namespace: ns1}", "rocketmq.transaction_check_groups"},
		{"rocketmq: {transaction_check_groups: [outbox-relay]}", "rocketmq.transaction_check_groups[0]"},
		{"rocketmq: {transaction_check_groups: [ok, routed]}\nroutes: [{topic: a, group: routed}]", "rocketmq.transaction_check_groups[1]"},
		{"relay: {poll_interval: soon}", "relay.poll_interval"},
		{"relay: {poll_interval: -1s}", "relay.poll_interval"},
		{"relay: {batch_size: 0}", "relay.batch_size"},
		{"relay: {batch_size: 10001}", "relay.batch_size"},
		{"relay: {batch_size: 1.5}", "relay.batch_size"},
		{"relay: {concurrency: 0}", "relay.concurrency"},
		{"relay: {partitions: 0}", "relay.partitions"},
		{"relay: {partitions: 1025}", "relay.partitions"},
		{"relay: {batch_send: maybe}", "relay.batch_send"},
		{"relay: {nudge: 2}", "relay.nudge"},
		{"relay: {unrouted: drop}", "relay.unrouted"},
		{"relay: {max_body_bytes: 0}", "relay.max_body_bytes"},
		{"relay: {shutdown_timeout: 0s}", "relay.shutdown_timeout"},
		{"relay: {purge_retention: -1h}", "relay.purge_retention"},
		{"relay: {purge_retention: 10m}", "relay.purge_retention"},
		{"relay: {purge_retention: 7days}", "relay.purge_retention"},
		{"mysql: {dsn: 'root:@tcp(127.0.0.1:3306)/'}", "mysql.dsn"},
		{"mysql: {dsn: 'app:pw@tcp(db:3306)/?parseTime=true'}", "mysql.dsn"},
		{"relay: {purge_interval: 0s}", "relay.purge_interval"},
		{"lock: {ttl: 10ms}", "lock.ttl"},
		{"lock: {key: ''}", "lock.key"},
		{"mysql: {tables: [a, b]}\nlock: {key: fixed}", "lock.key"},
		{"backoff: {base: 0s}", "backoff.base"},
		{"backoff: {multiplier: 0.5}", "backoff.multiplier"},
		{"backoff: {multiplier: lots}", "backoff.multiplier"},
		{"backoff: {max: 1ms}", "backoff.max"},
		{"backoff: {jitter: 2}", "backoff.jitter"},
		{"routes: [{tag: x}]", "routes[0].topic"},
		{"routes: [{topic: '[a'}]", "routes[0].topic"},
		{"routes: [{topic: a, tag: '[b'}]", "routes[0].tag"},
		{"routes: [{topic: a}, {topic: b, delay_level: 19}]", "routes[1].delay_level"},
		{"routes: [{topic: a, send_timeout: fast}]", "routes[0].send_timeout"},
		{"routes: [{topic: a, priority: 1}]", "routes[0].priority"},
		{"routes: [a]", "routes[0]"},
		{"http: {addr: '9464'}", "http.addr"},
		{"log: {level: loud}", "log.level"},
		{"log: {format: xml}", "log.format"},
		{"relay: {batchsize: 10}", "relay.batchsize"},
		{"metrics: {enabled: true}", "metrics.enabled"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			_, err := load(t, tt.yaml)
			if err == nil {
				t.Fatalf("Load(%q) succeeded, want an error naming %s", tt.yaml, tt.key)
			}
			if !strings.Contains(err.Error(), tt.key+":") {
				t.Fatalf("Load(%q) = %q, want it to name %s", tt.yaml, err, tt.key)
			}
		})
	}
}

// Check groups are accepted with ACL credentials: the responder signs its requests.
func TestCheckGroupsWithACLCredentials(t *testing.T) {
	t.Parallel()
	c, err := load(t, "rocketmq: {transaction_check_groups: [tx], transaction_check_secrets: [0123456789abcdef], access_key: ak, secret_key: sk}")
	if err != nil {
		t.Fatal(err)
	}
	if c.RocketMQ.AccessKey != "ak" || len(c.RocketMQ.TransactionCheckGroups) != 1 {
		t.Fatalf("rocketmq = %+v", c.RocketMQ)
	}
}

func TestErrorMessageFormat(t *testing.T) {
	t.Parallel()
	_, err := load(t, "relay: {batch_size: 0}")
	if err == nil || err.Error() != "relay.batch_size: must be between 1 and 10000, got 0" {
		t.Fatalf("err = %v", err)
	}
	// All problems are reported at once.
	_, err = load(t, "relay: {batch_size: 0, concurrency: 0}")
	if err == nil || !strings.Contains(err.Error(), "relay.batch_size") || !strings.Contains(err.Error(), "relay.concurrency") {
		t.Fatalf("err = %v", err)
	}
	_, err = load(t, "", "--poll-interval=0s")
	if err == nil || !strings.Contains(err.Error(), "relay.poll_interval") {
		t.Fatalf("flag error = %v", err)
	}
}

func TestMissingConfigFile(t *testing.T) {
	t.Parallel()
	_, err := Load(NewViper(), filepath.Join(t.TempDir(), "nope.yaml"))
	if err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("err = %v", err)
	}
}

func TestLogFormat(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"json": "json", "Console": "console", "auto": "", "''": ""} {
		c := mustLoad(t, "log: {format: "+in+"}")
		if c.Log.Format != want {
			t.Errorf("log.format %s -> %q, want %q", in, c.Log.Format, want)
		}
	}
}

func TestRedactionNeverLeaks(t *testing.T) {
	t.Setenv("OUTBOX_MYSQL_DSN", "app:Pa55w0rd-dsn@tcp(db:3306)/shop?tls=true")
	t.Setenv("OUTBOX_REDIS_PASSWORD", "redis-Secret-1")
	t.Setenv("OUTBOX_ROCKETMQ_ACCESS_KEY", "AKID")
	t.Setenv("OUTBOX_ROCKETMQ_SECRET_KEY", "rmq-Secret-2")
	c := mustLoad(t, "")
	if c.Redis.Password != "redis-Secret-1" || c.RocketMQ.SecretKey != "rmq-Secret-2" {
		t.Fatal("secrets not loaded")
	}
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	r := c.Redacted()
	outputs := map[string]string{
		"String": c.String(), "YAML": string(y), "%v": sprintf("%v", c), "%+v": sprintf("%+v", c),
		"%#v": sprintf("%#v", c), "%s": sprintf("%s", c), "Redacted": sprintf("%v %s %s %s", r.MySQL, r.MySQL.DSN, r.Redis.Password, r.RocketMQ.SecretKey),
	}
	for name, out := range outputs {
		for _, secret := range []string{"Pa55w0rd-dsn", "redis-Secret-1", "rmq-Secret-2"} {
			if strings.Contains(out, secret) {
				t.Errorf("%s leaks %q:\n%s", name, secret, out)
			}
		}
	}
	if r.MySQL.DSN != "app:*****@tcp(db:3306)/shop?tls=true" {
		t.Errorf("redacted DSN = %q", r.MySQL.DSN)
	}
	if c.MySQL.DSN != "app:Pa55w0rd-dsn@tcp(db:3306)/shop?tls=true" {
		t.Errorf("Redacted modified the original: %q", c.MySQL.DSN)
	}
	if !strings.Contains(string(y), "access_key: AKID") {
		t.Errorf("access key is not secret and should show:\n%s", y)
	}
	// Invalid secrets in errors: a DSN that fails to parse is not echoed.
	t.Setenv("OUTBOX_MYSQL_DSN", "app:Pa55w0rd-dsn@tcp(db:3306)")
	_, err = load(t, "")
	if err == nil || strings.Contains(err.Error(), "Pa55w0rd") {
		t.Errorf("error = %v", err)
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"root:@tcp(127.0.0.1:3306)/test":       "root:@tcp(127.0.0.1:3306)/test",
		"root@tcp(127.0.0.1:3306)/test":        "root@tcp(127.0.0.1:3306)/test",
		"u:p@tcp(h:1)/d":                       "u:*****@tcp(h:1)/d",
		"u:p@ss:w@rd@unix(/tmp/my.sock)/d?x=y": "u:*****@unix(/tmp/my.sock)/d?x=y",
		"u:p/w@tcp(h:1)/d":                     "u:*****@tcp(h:1)/d",
		"/d":                                   "/d",
		"":                                     "",
		"garbage-with-secret":                  Mask,
	} {
		if got := RedactDSN(in); got != want {
			t.Errorf("RedactDSN(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, `
mysql: {tables: [a, b]}
relay: {purge_retention: 168h, unrouted: dead}
backoff: {jitter: 0.2, multiplier: 3}
routes: [{topic: "order-*", ordered: true, delay_level: 2}]
log: {format: console}
`)
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	back := mustLoad(t, string(y))
	if !reflect.DeepEqual(back, c.Redacted()) {
		t.Fatalf("round trip differs:\n%s\n%s", y, back)
	}
}

// A namespace and TLS load from the file and from the environment alike.
func TestRocketMQNamespaceAndTLSFromFile(t *testing.T) {
	t.Parallel()
	c, err := load(t, "rocketmq: {namespace: MQ_INST_1-a, tls: {enable: true, insecure_skip_verify: true}}")
	if err != nil {
		t.Fatal(err)
	}
	if c.RocketMQ.Namespace != "MQ_INST_1-a" || !c.RocketMQ.TLS.Enable || !c.RocketMQ.TLS.InsecureSkipVerify {
		t.Fatalf("rocketmq = %+v", c.RocketMQ)
	}
}

func TestRocketMQNamespaceAndTLSFromEnv(t *testing.T) {
	t.Setenv("OUTBOX_ROCKETMQ_NAMESPACE", "tenant_a")
	t.Setenv("OUTBOX_ROCKETMQ_TLS_ENABLE", "true")
	t.Setenv("OUTBOX_ROCKETMQ_TLS_INSECURE_SKIP_VERIFY", "true")
	c := mustLoad(t, "")
	if c.RocketMQ.Namespace != "tenant_a" || !c.RocketMQ.TLS.Enable || !c.RocketMQ.TLS.InsecureSkipVerify {
		t.Fatalf("rocketmq = %+v", c.RocketMQ)
	}
	t.Setenv("OUTBOX_ROCKETMQ_TLS_INSECURE_SKIP_VERIFY", "false")
	t.Setenv("OUTBOX_ROCKETMQ_TLS_CA_FILE", "/nonexistent/ca.pem")
	if _, err := load(t, ""); err == nil || !strings.Contains(err.Error(), "rocketmq.tls.ca_file:") {
		t.Fatalf("verified TLS with a CA file that is not there: err = %v", err)
	}
}

// A configuration without mysql.dsn (and without databases) is refused naming the key and
// how to set it: the relay never falls back to a database nobody chose.
func TestMissingDSNIsAnError(t *testing.T) {
	t.Setenv("OUTBOX_MYSQL_DSN", "")
	_, err := Load(NewViper(), "")
	if err == nil {
		t.Fatal("Load accepted a configuration without mysql.dsn")
	}
	for _, want := range []string{"mysql.dsn: missing", "OUTBOX_MYSQL_DSN", "--mysql-dsn"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// The databases list needs no mysql.dsn.
	file := filepath.Join(t.TempDir(), "dbs.yaml")
	if err := os.WriteFile(file, []byte("databases: [{name: shop, dsn: 'u:p@tcp(h:3306)/shop'}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(NewViper(), file); err != nil {
		t.Fatalf("databases without mysql.dsn: %v", err)
	}
}

// TestRedisURLRefusedWithoutEchoingThePassword is issue 23, row 10: a Redis URL in
// redis.addr (or an address list) is refused naming the key, and the password is not in
// the message.
func TestRedisURLRefusedWithoutEchoingThePassword(t *testing.T) {
	t.Parallel()
	for _, yaml := range []string{
		"redis: {addr: 'redis://:s3cr3t-pw@cache:6379/0'}",
		"redis: {addr: 'rediss://app:s3cr3t-pw@cache:6380'}",
		"redis: {addrs: ['app:s3cr3t-pw@cache:6379'], cluster: true}",
		"lock: {redlock_addrs: ['redis://:s3cr3t-pw@a:6379', 'b:6379', 'c:6379']}",
	} {
		_, err := load(t, yaml)
		if err == nil || !strings.Contains(err.Error(), "redis.password") || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: %v; want a refusal pointing at redis.password, without the password", yaml, err)
		}
	}
}
