// SPDX-License-Identifier: Apache-2.0

// Command relaybench is the development benchmark tool of outbox-relay: it runs the relay
// against MariaDB/MySQL, Redis and the in-process test broker (internal/rmqtest), which the
// release binary does not link. Run it from a checkout:
//
//	go run ./internal/cmd/relaybench drain --rows 100000    # make bench-local
//	go run ./internal/cmd/relaybench load                   # make bench-load
//	go run ./internal/cmd/relaybench failover               # make bench-failover
//
// drain is `outbox-relay bench` against the in-process broker. load runs writers at a
// target rate beside relay processes (outbox-relay and the classic relay's algorithm in the same run)
// and reports commit → broker ack latency, rows/s, relay CPU and idle queries/s. failover
// measures the delivery gap after kill -9 and SIGTERM of the leader. Every run creates its
// own database (outbox_bench_<random>) on the server and drops it at the end.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/apache/rocketmq-client-go/v2/rlog"
)

func main() {
	rlog.SetLogLevel("error")
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	args := os.Args[2:]
	switch os.Args[1] {
	case "drain":
		err = runDrain(ctx, args)
	case "load":
		err = runLoad(ctx, args)
	case "failover":
		err = runFailover(ctx, args)
	case "partitions":
		err = runPartitions(ctx, args)
	case "rolling":
		err = runRolling(ctx, args)
	case seedRelayCmd:
		err = runSeedRelay(ctx, args)
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		fmt.Fprintf(os.Stderr, "relaybench: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relaybench:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: relaybench <command> [flags]   (relaybench <command> -h lists the flags)

  drain     fill a table and drain it once to the in-process broker (outbox-relay bench's measure)
  load      production load: writers at a rate, relay processes, outbox-relay vs the classic relay
  failover  delivery gap after kill -9 and SIGTERM of the leader, default settings
  rolling   a Kubernetes rolling update with processes: surge (new ready, then old SIGTERM)
            and recreate; delivery gap, SIGTERM → exit, RSS, CPU, duplicates
  partitions  a relay group on one table: drain rate with 1, 2, 3 relays, idle Redis upkeep,
            takeover after kill -9, join; the classic relay on the same backlog
`)
}
