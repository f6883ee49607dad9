// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
	"time"
)

// Two services sharing one Redis must not share a lock: the default key names the database
// (server and schema), never its credentials.
func TestLockKeyIdentifiesTheDatabase(t *testing.T) {
	t.Parallel()
	shop := mustLoad(t, "mysql: {dsn: 'app:Secr3t@tcp(DB1.internal:3306)/shop?parseTime=true'}")
	pay := mustLoad(t, "mysql: {dsn: 'app:Secr3t@tcp(db1.internal:3306)/payments'}")
	other := mustLoad(t, "mysql: {dsn: 'app:Secr3t@tcp(db2.internal)/shop'}")
	keys := map[string]string{
		"shop":  shop.LockKey("local_message"),
		"pay":   pay.LockKey("local_message"),
		"other": other.LockKey("local_message"),
	}
	if keys["shop"] != "outbox-relay:lock:db1.internal:3306/shop:local_message" {
		t.Errorf("shop key = %q", keys["shop"])
	}
	if keys["other"] != "outbox-relay:lock:db2.internal:3306/shop:local_message" {
		t.Errorf("default port not filled in: %q", keys["other"])
	}
	if keys["shop"] == keys["pay"] || keys["shop"] == keys["other"] {
		t.Errorf("different databases share a lock key: %v", keys)
	}
	for name, k := range keys {
		if strings.Contains(k, "Secr3t") || strings.Contains(k, "app") || strings.Contains(k, "parseTime") {
			t.Errorf("%s key %q carries credentials or parameters", name, k)
		}
	}
	if got := DatabaseLabel("u:p@unix(/run/mysqld/mysqld.sock)/shop"); got != "unix(/run/mysqld/mysqld.sock)/shop" {
		t.Errorf("socket label = %q", got)
	}
	if got := shop.DatabaseLabel(); got != "db1.internal:3306/shop" {
		t.Errorf("Config.DatabaseLabel = %q", got)
	}
	if DatabaseLabel("garbage") != "" {
		t.Error("label of an invalid DSN")
	}

	// Custom keys keep working, with either placeholder or none.
	custom := mustLoad(t, "mysql: {dsn: 'u:p@tcp(h:1)/d'}\nlock: {key: 'app:{table}'}")
	if got := custom.LockKey("t1"); got != "app:t1" {
		t.Errorf("custom {table} key = %q", got)
	}
	custom = mustLoad(t, "mysql: {dsn: 'u:p@tcp(h:1)/d'}\nlock: {key: 'x/{db}/{table}'}")
	if got := custom.LockKey("t1"); got != "x/h:1/d/t1" {
		t.Errorf("custom {db} key = %q", got)
	}
}

// Kubernetes users configure through the environment: a misspelt variable is an error naming
// it, like an unknown key in the file; the scripts' own prefixes are reserved.
func TestUnknownEnvironmentVariable(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_BATCHSIZE", "100")
	t.Setenv("OUTBOX_MYSQL_PASSWORD", "x")
	t.Setenv("OUTBOX_TEST_MYSQL_DSN", "root:@tcp(127.0.0.1:1)/")
	t.Setenv("OUTBOX_TEST_ROCKETMQ_NAMESRV", "127.0.0.1:1")
	t.Setenv("OUTBOX_BENCH_ROWS", "10")
	t.Setenv("OUTBOX_SERVICES_DIR", "/tmp/x")
	t.Setenv("OUTBOX_CONFIG", "")
	_, err := load(t, "")
	if err == nil {
		t.Fatal("Load accepted OUTBOX_RELAY_BATCHSIZE")
	}
	for _, want := range []string{"OUTBOX_RELAY_BATCHSIZE: unknown environment variable", "OUTBOX_MYSQL_PASSWORD: unknown"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	for _, reserved := range []string{"OUTBOX_TEST_", "OUTBOX_BENCH_", "OUTBOX_SERVICES_", "OUTBOX_CONFIG:"} {
		if strings.Contains(err.Error(), reserved) && !strings.Contains(err.Error(), "reserved for scripts") {
			t.Errorf("reserved variable %s reported:\n%v", reserved, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 2 {
		t.Errorf("want exactly the 2 unknown variables, got %d lines:\n%v", n, err)
	}
}

func TestReservedEnvironmentPrefixesLoad(t *testing.T) {
	t.Setenv("OUTBOX_TEST_MYSQL_DSN", "root:@tcp(127.0.0.1:1)/")
	t.Setenv("OUTBOX_BENCH_ROWS", "10")
	t.Setenv("OUTBOX_SERVICES_MYSQL_PORT", "13306")
	mustLoad(t, "")
}

// A value that cannot be decoded does not hide the other problems of the configuration.
func TestEveryProblemReportedAtOnce(t *testing.T) {
	t.Parallel()
	_, err := load(t, "mysql: {dsn: 'u:p@tcp(h:1)/'}\nrelay: {batch_size: lots, concurrency: 0}\nlock: {ttl: soon}\nbogus: 1\n")
	if err == nil {
		t.Fatal("no error")
	}
	for _, key := range []string{"mysql.dsn:", "relay.batch_size:", "relay.concurrency:", "lock.ttl:", "bogus:"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %s:\n%v", key, err)
		}
	}
	// The undecodable batch_size is reported once, not also as out of range.
	if strings.Count(err.Error(), "relay.batch_size:") != 1 {
		t.Errorf("relay.batch_size reported twice:\n%v", err)
	}
}

func TestDurationsAcceptDays(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, "relay: {purge_retention: 7d}\nbackoff: {max: 1d12h}", "--poll-interval=1d")
	if c.Relay.PurgeRetention != 7*24*time.Hour || c.Backoff.Max != 36*time.Hour || c.Relay.PollInterval != 24*time.Hour {
		t.Fatalf("days: retention %s, backoff.max %s, poll %s", c.Relay.PurgeRetention, c.Backoff.Max, c.Relay.PollInterval)
	}
	for in, want := range map[string]time.Duration{
		"7d": 168 * time.Hour, "1.5d": 36 * time.Hour, " 2h ": 2 * time.Hour, "500ms": 500 * time.Millisecond, "-1d": -24 * time.Hour,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"d", "7", "7 d", "7days", "1e9d", ""} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}

// Default is the documented defaults whatever the environment says.
func TestDefaultIgnoresTheEnvironment(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_BATCH_SIZE", "7")
	t.Setenv("OUTBOX_NOT_A_KEY", "x")
	if c := Default(); c.Relay.BatchSize != 500 {
		t.Fatalf("Default().Relay.BatchSize = %d", c.Relay.BatchSize)
	}
}
