package dashboard

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// LockState is what the dashboard shows of a table's leader lock. The lock's random token is
// never part of it: it is what lets a holder extend or release the lock.
type LockState struct {
	Key  string `json:"key"`
	Held bool   `json:"held"`
	// Host and PID name the holder when its value says so (relays of this version write
	// "host=… pid=… since=… token=…"); Since is when it took the lock.
	Host           string     `json:"host,omitempty"`
	PID            int        `json:"pid,omitempty"`
	Since          *time.Time `json:"since,omitempty"`
	HeldForSeconds float64    `json:"held_for_seconds,omitempty"`
	// TTLMillis is how long the lock lives unless its holder extends it.
	TTLMillis int64 `json:"ttl_ms,omitempty"`
	// ThisRelay is true when the holder is the process serving the page.
	ThisRelay bool   `json:"this_relay"`
	Error     string `json:"error,omitempty"`
}

// readLock reads the lock at key: its value and its remaining time to live.
func readLock(ctx context.Context, rdb redis.Cmdable, key string, now time.Time) LockState {
	st := LockState{Key: key}
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		get, pttl = p.Get(ctx, key), p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return st // free
	}
	if err != nil {
		st.Error = "redis: " + err.Error()
		return st
	}
	st.Held = true
	if d := pttl.Val(); d > 0 {
		st.TTLMillis = d.Milliseconds()
	}
	holder := parseLockValue(get.Val())
	st.Host = holder["host"]
	st.PID, _ = strconv.Atoi(holder["pid"])
	if ms, err := strconv.ParseInt(holder["since"], 10, 64); err == nil && ms > 0 {
		since := time.UnixMilli(ms).UTC()
		st.Since, st.HeldForSeconds = &since, now.Sub(since).Seconds()
	}
	st.ThisRelay = st.PID == os.Getpid() && st.Host == hostname()
	return st
}

// parseLockValue splits a lock value written by relay (space-separated key=value fields) and
// keeps the fields that name the holder. Any other value (an older relay's random token)
// gives an empty map.
func parseLockValue(v string) map[string]string {
	out := map[string]string{}
	for _, f := range strings.Fields(v) {
		k, val, ok := strings.Cut(f, "=")
		if ok && (k == "host" || k == "pid" || k == "since") {
			out[k] = val
		}
	}
	return out
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}
