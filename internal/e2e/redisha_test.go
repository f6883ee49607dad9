// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/redisconn/redistest"
)

// statusLock runs `outbox-relay status --json` with extra OUTBOX_ variables and returns the
// lock of the first table.
func (e *env) statusLock(t *testing.T, extra ...string) (held bool, errText string) {
	t.Helper()
	cmd := exec.Command(binary, "status", "--json")
	cmd.Env = e.environ(extra...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("outbox-relay status: %v\n%s", err, out)
	}
	var reports []struct {
		Lock struct {
			Held  bool   `json:"held"`
			Error string `json:"error"`
		} `json:"lock"`
	}
	if err := json.Unmarshal(out, &reports); err != nil || len(reports) == 0 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return reports[0].Lock.Held, reports[0].Lock.Error
}

// The binary configured for Sentinel (OUTBOX_REDIS_ADDRS + OUTBOX_REDIS_MASTER_NAME) leads
// through the master, `status` reads its lock through the Sentinels, and after kill -9 of
// the master it leads again through the promoted replica and delivers every row.
func TestBinaryWithSentinel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	g := redistest.NewSentinelGroup(t, time.Second)
	sentinel := []string{
		"OUTBOX_REDIS_ADDRS=" + strings.Join(g.SentinelAddrs(), ","),
		"OUTBOX_REDIS_MASTER_NAME=" + redistest.MasterName,
	}
	p := e.startRelay(t, sentinel...)
	e.insertN(t, "before", 100)
	eventually(t, 30*time.Second, "rows sent through the Sentinel master", func() bool {
		return e.count(t, "status = 2") == 100
	})
	if held, errText := e.statusLock(t, sentinel...); !held {
		t.Fatalf("status through the Sentinels: lock not held (%s)", errText)
	}
	g.Master.Kill()
	e.insertN(t, "during", 100)
	eventually(t, 60*time.Second, "the Sentinels to promote the replica", func() bool {
		a, err := g.MasterAddr(t.Context())
		return err == nil && a == g.Replica.Addr
	})
	e.insertN(t, "after", 100)
	eventually(t, 60*time.Second, "rows sent after the failover", func() bool {
		return e.count(t, "status = 2") == 300
	})
	if held, errText := e.statusLock(t, sentinel...); !held {
		t.Fatalf("status after the failover: lock not held (%s)", errText)
	}
	if !strings.Contains(p.Out.String(), `"redis":"sentinel master `+redistest.MasterName) {
		t.Errorf("the start log does not say the relay uses Sentinel:\n%s", p.Out.String())
	}
}

// The binary with OUTBOX_LOCK_REDLOCK_ADDRS holds its lock on the quorum: `status` reads it
// held, still with one master of three down, and the relay keeps delivering.
func TestBinaryWithRedlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := []*redistest.Proc{redistest.Server(t), redistest.Server(t), redistest.Server(t)}
	redlock := []string{"OUTBOX_LOCK_REDLOCK_ADDRS=" + m[0].Addr + "," + m[1].Addr + "," + m[2].Addr}
	e.startRelay(t, redlock...)
	e.insertN(t, "before", 100)
	eventually(t, 30*time.Second, "rows sent under the Redlock lock", func() bool {
		return e.count(t, "status = 2") == 100
	})
	for _, p := range m {
		if n, err := p.Client().Exists(t.Context(), e.prefix+"lock:local_message").Result(); err != nil || n != 1 {
			t.Fatalf("the lock is not on Redlock master %s (exists=%d, %v)", p.Addr, n, err)
		}
	}
	m[1].Kill()
	e.insertN(t, "one-down", 100)
	eventually(t, 30*time.Second, "rows sent with one master down", func() bool {
		return e.count(t, "status = 2") == 200
	})
	if held, errText := e.statusLock(t, redlock...); !held {
		t.Fatalf("status with one Redlock master of three down: lock not held (%s)", errText)
	}
}
