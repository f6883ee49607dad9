// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

func (a *app) newHealthcheckCmd() *cobra.Command {
	var url string
	var pid int
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 if the relay's /healthz answers 200 (for container HEALTHCHECKs)",
		Long: `Ask the relay's /healthz and exit 0 if it answers 200, 1 otherwise. The address is
--url, else http.addr of the configuration, read as the relay reads it. With --pid N the
command line of process N (from /proc) is read as well, so that a relay started with
"run --config FILE" or "--http-addr ADDR" is checked where it listens: the image's
HEALTHCHECK uses --pid=1, the relay being the container's first process.`,
		Hidden: true,
		Args:   cobra.NoArgs,
		// The configuration that matters is the relay's (see --pid): loaded in RunE.
		Annotations: map[string]string{noConfig: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if url == "" {
				var addr string
				if pid > 0 {
					var err error
					if addr, err = httpAddrOf(pid); err != nil {
						return err
					}
				} else {
					cfg, err := probeConfigFrom(cmd.Flags())
					if err != nil {
						return err
					}
					addr = cfg.HTTP.Addr
				}
				url = healthURL(addr)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return usageError("healthcheck: %v", err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("healthcheck: %w", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("healthcheck: %s answered %s", url, resp.Status)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "", "URL to check (default: /healthz on http.addr, via 127.0.0.1)")
	cmd.Flags().IntVar(&pid, "pid", 0, "also read the flags (--config, --http-addr) of this process's command line, e.g. 1 in a container")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "time allowed for the answer")
	return cmd
}

// httpAddrOf returns the http.addr of the relay running as process pid: its configuration
// loaded from its own command line (read from /proc) and this process's environment, which
// in a container is the relay's too.
func httpAddrOf(pid int) (string, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return "", fmt.Errorf("healthcheck: read the command line of process %d: %w", pid, err)
	}
	args := bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0})
	var argv []string
	for _, b := range args[1:] {
		argv = append(argv, string(b))
	}
	root := (&app{}).newRootCmd()
	c, rest, err := root.Find(argv)
	if err != nil {
		return "", fmt.Errorf("healthcheck: process %d is not an outbox-relay command line: %w", pid, err)
	}
	if err := c.ParseFlags(rest); err != nil {
		return "", fmt.Errorf("healthcheck: flags of process %d: %w", pid, err)
	}
	cfg, err := probeConfigFrom(c.Flags())
	if err != nil {
		return "", fmt.Errorf("healthcheck: configuration of process %d: %w", pid, err)
	}
	return cfg.HTTP.Addr, nil
}

// probeConfigFrom is configFrom for the probe, which needs only http.addr: a mysql.dsn the
// probe cannot see (given to the relay some other way) is no reason to fail it.
func probeConfigFrom(flags *pflag.FlagSet) (config.Config, error) {
	cfg, err := configFrom(flags)
	if err == nil {
		return cfg, nil
	}
	v := config.NewViper()
	v.SetDefault(config.KeyMySQLDSN, "probe@tcp(127.0.0.1:3306)/unused")
	if cfg, err2 := configFromWith(flags, v); err2 == nil {
		return cfg, nil
	}
	return config.Config{}, err
}

// healthURL turns a listen address such as ":9464" or "0.0.0.0:9464" into a URL on loopback.
func healthURL(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "http://" + addr + "/healthz"
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz"
}
