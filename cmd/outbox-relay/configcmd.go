// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"
)

func (a *app) newConfigCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration as YAML, secrets redacted",
		Long: `Print the configuration the relay would run with, after the file, the environment and
the flags, as YAML that can be used as a config file. The MySQL password (of mysql.dsn and of
every databases[].dsn), redis.password, redis.sentinel_password and rocketmq.secret_key are replaced by *****. An invalid configuration exits 2 naming the keys.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := a.cfg.YAML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
}
