package main

import (
	"context"
	"errors"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

func (a *app) newRunCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "run",
		Short: "Run the relay (the default command)",
		Long: `Run the relay: hold the leader lock for each configured table, publish due rows to
RocketMQ, retry failures with backoff, serve /metrics, /healthz and /readyz on http.addr,
and purge old sent rows when relay.purge_retention is set. SIGINT or SIGTERM stops it
cleanly: the in-flight batch finishes or is left due, the lock is released, exit 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.log.Info().Strs("tables", a.cfg.Tables()).Strs("nameservers", a.cfg.RocketMQ.NameServers).
				Str("redis", a.cfg.Redis.Addr).Str("http", a.cfg.HTTP.Addr).Str("version", version).Msg("starting")
			return runRelay(cmd.Context(), a.cfg, a.log)
		},
	}
}

// errNotImplemented is returned by runRelay until the relay is wired in.
var errNotImplemented = errors.New("run: the relay is not implemented yet")

// runRelay runs the delivery engine until ctx is cancelled (SIGINT/SIGTERM), then shuts it
// down within cfg.Relay.ShutdownTimeout and returns nil; any other return is a runtime error
// (exit 1). cfg is validated; log is the process logger.
//
// HOOK for the relay package: open the database, Redis and the producer from cfg, start the
// relay for every cfg.Tables(), the HTTP server on cfg.HTTP.Addr, and, when
// cfg.Relay.PurgeRetention > 0, ops.PurgeLoop every cfg.Relay.PurgeInterval.
func runRelay(ctx context.Context, cfg config.Config, log zerolog.Logger) error {
	_, _, _ = ctx, cfg, log
	return errNotImplemented
}
