// SPDX-License-Identifier: Apache-2.0

package config

import (
	"fmt"
	"strings"
)

// problems lists the contradictions among the redis.* keys, each naming the key to change.
func (r Redis) problems() []problem {
	var out []problem
	bad := func(key, format string, args ...any) {
		out = append(out, problem{key, fmt.Sprintf(format, args...)})
	}
	out = append(out, addrListProblems(KeyRedisAddrs, r.Addrs)...)
	switch {
	case r.MasterName != "" && len(r.Addrs) == 0:
		bad(KeyRedisMasterName, "needs redis.addrs listing the Sentinels (host:port of each, usually port 26379)")
	case r.Cluster && len(r.Addrs) == 0:
		bad(KeyRedisCluster, "needs redis.addrs listing seed nodes of the Cluster")
	case len(r.Addrs) > 0 && r.MasterName == "" && !r.Cluster:
		bad(KeyRedisAddrs, "lists several Redis nodes: set redis.master_name (they are Sentinels) or redis.cluster: true (they are Cluster nodes); a single Redis goes in redis.addr")
	}
	if r.Cluster && r.MasterName != "" {
		bad(KeyRedisCluster, "cannot be combined with redis.master_name: Sentinel or Cluster, not both")
	}
	if r.Cluster && r.DB != 0 {
		bad(KeyRedisDB, "must be 0 with redis.cluster: a Redis Cluster has only database 0, got %d", r.DB)
	}
	if r.SentinelPassword != "" && r.MasterName == "" {
		bad(KeyRedisSentinelPassword, "is only used with redis.master_name (Sentinel); remove it or set redis.master_name")
	}
	return out
}

// redlockProblems checks lock.redlock_addrs: an odd number of at least MinRedlockMasters
// distinct host:port addresses.
func (l Lock) redlockProblems() []problem {
	out := addrListProblems(KeyLockRedlockAddrs, l.RedlockAddrs)
	n := len(l.RedlockAddrs)
	switch {
	case n == 0:
	case n < MinRedlockMasters:
		out = append(out, problem{KeyLockRedlockAddrs, fmt.Sprintf("needs at least %d independent masters for a quorum that survives losing one, got %d (leave it empty to hold the lock on redis.*)", MinRedlockMasters, n)})
	case n%2 == 0:
		out = append(out, problem{KeyLockRedlockAddrs, fmt.Sprintf("must list an odd number of masters, got %d: a quorum of %d out of %d survives no more failures than %d masters would", n, n/2+1, n, n-1)})
	}
	return out
}

// addrListProblems checks that every entry of a list of Redis nodes is host:port, once.
func addrListProblems(key string, addrs []string) []problem {
	var out []problem
	seen := map[string]bool{}
	for i, a := range addrs {
		k := fmt.Sprintf("%s[%d]", key, i)
		if err := hostPort(a); err != nil {
			out = append(out, problem{k, err.Error()})
		} else if seen[strings.ToLower(a)] {
			out = append(out, problem{k, fmt.Sprintf("duplicate address %q", a)})
		}
		seen[strings.ToLower(a)] = true
	}
	return out
}
