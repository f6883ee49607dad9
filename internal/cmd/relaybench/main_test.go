// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// TestMain lets the test binary stand in for relaybench when load starts the classic relay
// as a process of its own (os.Executable is the test binary here).
func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	if len(os.Args) > 1 && os.Args[1] == seedRelayCmd {
		if err := runSeedRelay(context.Background(), os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func servers() []string {
	return []string{"-mysql", testenv.MySQLServerDSN(), "-redis", testenv.RedisAddr()}
}

// TestLoadDeliversEveryCommittedRow: a short load run of both relays ends with every
// committed row delivered and none of a rolled-back transaction (runLoad checks and fails).
func TestLoadDeliversEveryCommittedRow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds outbox-relay and runs relay processes")
	}
	testenv.MySQL(t) // fails or skips as the other tests do when the servers are missing
	testenv.Redis(t)
	args := append(servers(), "-duration", "2s", "-idle", "1s", "-polls", "200ms", "-relays", "1",
		"-algos", "outbox-relay,classic", "-rate", "50")
	if err := runLoad(context.Background(), args); err != nil {
		t.Fatal(err)
	}
}

// TestFailoverDeliversEveryCommittedRow: one kill -9 and one SIGTERM of the leader with the
// default settings; every committed row is delivered (runFailover checks and fails).
func TestFailoverDeliversEveryCommittedRow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds outbox-relay and runs relay processes")
	}
	testenv.MySQL(t)
	testenv.Redis(t)
	if err := runFailover(context.Background(), append(servers(), "-rounds", "1", "-rate", "40")); err != nil {
		t.Fatal(err)
	}
}

// TestRollingUpdateDeliversEveryCommittedRowOnce: a rolling update of two relays (surge) and
// a recreate, writers committing; every committed row is delivered, and none twice: a
// SIGTERMed leader writes its sends back before its successor takes the lock (runRolling
// checks and fails).
func TestRollingUpdateDeliversEveryCommittedRowOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds outbox-relay and runs relay processes")
	}
	testenv.MySQL(t)
	testenv.Redis(t)
	if err := runRolling(context.Background(), append(servers(), "-replicas", "2", "-rounds", "1", "-rate", "40")); err != nil {
		t.Fatal(err)
	}
}

// TestPartitionsBench: a short run of the relay-group bench with one and two relays: every
// row is sent, the survivor of a kill -9 and the relays after a join and a SIGTERM own every
// partition once (runPartitions fails otherwise).
func TestPartitionsBench(t *testing.T) {
	if testing.Short() {
		t.Skip("builds outbox-relay and runs relay processes")
	}
	testenv.MySQL(t)
	testenv.Redis(t)
	args := append(servers(), "-rows", "2000", "-relays", "1,2", "-idle", "500ms", "-classic=false")
	if err := runPartitions(context.Background(), args); err != nil {
		t.Fatal(err)
	}
}

func TestDrain(t *testing.T) {
	testenv.MySQL(t)
	if err := runDrain(context.Background(), append(servers()[:2], "-rows", "1500", "-batch-size", "200")); err != nil {
		t.Fatal(err)
	}
}

func TestUsageErrorsNameTheFlag(t *testing.T) {
	for _, args := range [][]string{{"-rate", "0"}, {"-polls", "soon"}, {"-relays", "0"}, {"-algos", "kafka"}} {
		err := runLoad(context.Background(), args)
		if err == nil || !strings.Contains(err.Error(), "-"+args[0]) {
			t.Errorf("load %v: %v, want an error naming --%s", args, err, args[0][1:])
		}
	}
}
