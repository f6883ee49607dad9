// SPDX-License-Identifier: Apache-2.0

// Command outbox-relay is the transactional-outbox sidecar: it relays committed rows of an
// outbox table to RocketMQ (run, the default command) and gives operators migrate, status,
// dead list, requeue and purge. See docs/cli.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, restore the default handling: a second Ctrl-C kills at once.
		<-ctx.Done()
		stop()
	}()
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
