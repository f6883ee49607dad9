// SPDX-License-Identifier: Apache-2.0

package config

import (
	"reflect"
	"strings"
	"testing"
)

// Every contradiction among the Redis keys is an error naming the key to change.
func TestRedisContradictionsNameTheirKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml, key, says string
	}{
		{"master name without sentinels", `redis: {master_name: mymaster}`, "redis.master_name:", "redis.addrs"},
		{"cluster without seeds", `redis: {cluster: true}`, "redis.cluster:", "seed nodes"},
		{"addrs of nothing", `redis: {addrs: ["a:26379", "b:26379"]}`, "redis.addrs:", "redis.master_name"},
		{"sentinel and cluster", `redis: {addrs: ["a:1"], master_name: m, cluster: true}`, "redis.cluster:", "not both"},
		{"cluster with a db", `redis: {addrs: ["a:1"], cluster: true, db: 2}`, "redis.db:", "must be 0"},
		{"sentinel password alone", `redis: {sentinel_password: pw}`, "redis.sentinel_password:", "redis.master_name"},
		{"bad sentinel address", `redis: {addrs: ["a:1", "nope"], master_name: m}`, "redis.addrs[1]:", "host:port"},
		{"duplicate seed", `redis: {addrs: ["a:1", "A:1"], cluster: true}`, "redis.addrs[1]:", "duplicate"},
		{"redlock of two", `lock: {redlock_addrs: ["a:1", "b:1"]}`, "lock.redlock_addrs:", "at least 3"},
		{"redlock of four", `lock: {redlock_addrs: ["a:1", "b:1", "c:1", "d:1"]}`, "lock.redlock_addrs:", "odd number"},
		{"bad redlock address", `lock: {redlock_addrs: ["a:1", "b", "c:1"]}`, "lock.redlock_addrs[1]:", "host:port"},
		{"cluster flag not a bool", `redis: {addrs: ["a:1"], cluster: maybe}`, "redis.cluster:", "true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml)
			if err == nil {
				t.Fatalf("%s: loaded without error", tc.yaml)
			}
			line := ""
			for _, l := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(l, tc.key) {
					line = l
				}
			}
			if line == "" || !strings.Contains(line, tc.says) {
				t.Fatalf("%s: want an error starting %q saying %q, got:\n%v", tc.yaml, tc.key, tc.says, err)
			}
		})
	}
}

// The valid set-ups load, and each says which mode the client takes.
func TestRedisModes(t *testing.T) {
	t.Parallel()
	for yaml, mode := range map[string]string{
		``: "single",
		`redis: {addrs: ["s1:26379", "s2:26379", "s3:26379"], master_name: mymaster, sentinel_password: x}`: "sentinel",
		`redis: {addrs: ["n1:7000"], cluster: true}`:                                                        "cluster",
		`lock: {redlock_addrs: ["a:1", "b:1", "c:1", "d:1", "e:1"]}`:                                        "single",
	} {
		c := mustLoad(t, yaml)
		if got := c.Redis.Mode(); got != mode {
			t.Errorf("%s: mode %s, want %s", yaml, got, mode)
		}
	}
}

// The environment sets every Redis key; lists are comma-separated; secrets are masked in
// what `outbox-relay config` prints.
func TestRedisEnvironment(t *testing.T) {
	t.Setenv("OUTBOX_REDIS_ADDRS", "s1:26379, s2:26379,s3:26379")
	t.Setenv("OUTBOX_REDIS_MASTER_NAME", "mymaster")
	t.Setenv("OUTBOX_REDIS_SENTINEL_PASSWORD", "sentinel-Secret")
	t.Setenv("OUTBOX_REDIS_USERNAME", "relay")
	t.Setenv("OUTBOX_REDIS_PASSWORD", "data-Secret")
	t.Setenv("OUTBOX_LOCK_REDLOCK_ADDRS", "r1:6379,r2:6379,r3:6379")
	c := mustLoad(t, "")
	want := Redis{Addr: "127.0.0.1:6379", Password: "data-Secret", Addrs: []string{"s1:26379", "s2:26379", "s3:26379"},
		MasterName: "mymaster", SentinelPassword: "sentinel-Secret", Username: "relay"}
	if !reflect.DeepEqual(c.Redis, want) {
		t.Fatalf("redis from the environment: %+v, want %+v", c.Redis, want)
	}
	if got := c.Lock.RedlockAddrs; !reflect.DeepEqual(got, []string{"r1:6379", "r2:6379", "r3:6379"}) {
		t.Fatalf("lock.redlock_addrs from the environment: %v", got)
	}
	out := c.String()
	for _, secret := range []string{"sentinel-Secret", "data-Secret"} {
		if strings.Contains(out, secret) {
			t.Fatalf("printed configuration shows a secret:\n%s", out)
		}
	}
	if !strings.Contains(out, "sentinel_password: '"+Mask+"'") && !strings.Contains(out, "sentinel_password: "+Mask) {
		t.Fatalf("printed configuration does not show that sentinel_password is set:\n%s", out)
	}

	t.Setenv("OUTBOX_REDIS_MASTER_NAME", "")
	t.Setenv("OUTBOX_REDIS_CLUSTER", "true")
	t.Setenv("OUTBOX_REDIS_SENTINEL_PASSWORD", "")
	if c := mustLoad(t, ""); c.Redis.Mode() != "cluster" {
		t.Fatalf("OUTBOX_REDIS_CLUSTER=true: mode %s", c.Redis.Mode())
	}
}
