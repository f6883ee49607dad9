// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/classicrelay"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// seedRelayCmd runs the classic relay as a process of its own, so that its CPU is measured
// the way outbox-relay's is. The load command starts it; it is not meant for users.
const seedRelayCmd = "classic-relay"

// relaySpec says how to start one relay process of a table.
type relaySpec struct {
	algo      string // algoRelay or algoSeed
	relayBin  string
	dsn       string
	table     string
	redisAddr string
	lockKey   string
	nameSrv   string
	group     string // producer group: tells at the broker which process published
	poll      time.Duration
	nudge     bool
	defaults  bool     // outbox-relay with its default poll interval, lock TTL and nudge
	extra     []string // more OUTBOX_ variables for outbox-relay
}

const (
	algoRelay = "outbox-relay"
	algoSeed  = "classic relay"
)

// proc is a running relay process.
type proc struct {
	group string
	cmd   *exec.Cmd
	out   testenv.SyncBuffer
	done  chan struct{}
	err   error
}

func startRelay(s relaySpec) (*proc, error) {
	var cmd *exec.Cmd
	switch s.algo {
	case algoRelay:
		cmd = exec.Command(s.relayBin, "run")
		cmd.Env = append(os.Environ(),
			"OUTBOX_MYSQL_DSN="+s.dsn, "OUTBOX_MYSQL_TABLE="+s.table,
			"OUTBOX_REDIS_ADDR="+s.redisAddr, "OUTBOX_LOCK_KEY="+s.lockKey,
			"OUTBOX_ROCKETMQ_NAMESERVERS="+s.nameSrv, "OUTBOX_ROCKETMQ_GROUP="+s.group,
			"OUTBOX_HTTP_ADDR=127.0.0.1:0", "OUTBOX_LOG_LEVEL=info", "OUTBOX_LOG_FORMAT=json",
		)
		if !s.defaults {
			cmd.Env = append(cmd.Env, "OUTBOX_RELAY_POLL_INTERVAL="+s.poll.String(),
				"OUTBOX_RELAY_NUDGE="+strconv.FormatBool(s.nudge))
		}
		cmd.Env = append(cmd.Env, s.extra...)
	case algoSeed:
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cmd = exec.Command(self, seedRelayCmd, "-dsn", s.dsn, "-table", s.table, "-redis", s.redisAddr,
			"-lock-key", s.lockKey, "-nameservers", s.nameSrv, "-group", s.group, "-interval", s.poll.String())
	default:
		return nil, fmt.Errorf("unknown relay %q", s.algo)
	}
	p := &proc{group: s.group, cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.out, &p.out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", s.algo, err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace, then kills.
func (p *proc) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpu is the process's user + system CPU time so far, from /proc/<pid>/stat.
func (p *proc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at state, field 3;
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100 on Linux).
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(fields[11], 10, 64)
	st, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// runSeedRelay is the classic-relay command: the classic relay until SIGTERM.
func runSeedRelay(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(seedRelayCmd, flag.ContinueOnError)
	dsn := fs.String("dsn", "", "database DSN")
	table := fs.String("table", "local_message", "outbox table")
	redisAddr := fs.String("redis", "127.0.0.1:6379", "Redis address")
	lockKey := fs.String("lock-key", "LocalMessageScan", "lock key")
	nameSrv := fs.String("nameservers", "", "name server")
	group := fs.String("group", "classic-relay", "producer group")
	interval := fs.Duration("interval", time.Minute, "the job's schedule")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dsn == "" || *nameSrv == "" {
		return errors.New("classic-relay: -dsn and -nameservers are required")
	}
	db, err := openDB(*dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	rdb := redis.NewClient(&redis.Options{Addr: *redisAddr})
	defer rdb.Close()
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{*nameSrv}, Group: *group})
	if err != nil {
		return err
	}
	defer pub.Close()
	r, err := classicrelay.New(db, rdb, pub, classicrelay.Config{Table: *table, Interval: *interval, LockKey: *lockKey})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
