// SPDX-License-Identifier: Apache-2.0

// Package redisconn turns the redis.* and lock.* configuration into the go-redis clients the
// relay uses: one redis.UniversalClient for nudges and the leader lock (a single node, a
// Sentinel-managed master that the client follows through failovers, or a Cluster), and,
// when lock.redlock_addrs is set, one client per independent master of a Redlock quorum,
// which then holds the lock instead. The run command, the operator commands (status) and
// the dashboard all connect through it, so they read the lock where the relay holds it.
package redisconn
