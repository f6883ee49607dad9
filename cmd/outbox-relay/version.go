// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Build information, set with -ldflags "-X main.version=... -X main.commit=... -X main.date=..."
// (see the Makefile's build target).
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildInfo fills what -ldflags left empty from the module's VCS stamp, when Go recorded one.
func buildInfo() (v, c, d string) {
	v, c, d = version, commit, date
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && c == "":
				c = s.Value
			case s.Key == "vcs.time" && d == "":
				d = s.Value
			}
		}
	}
	if c == "" {
		c = "unknown"
	}
	if d == "" {
		d = "unknown"
	}
	return v, c, d
}

func (a *app) newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:         "version",
		Short:       "Print the version, commit, build date and Go version",
		Args:        cobra.NoArgs,
		Annotations: map[string]string{noConfig: "true"},
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}

// versionText is what `version` and `--version` print.
func versionText() string {
	v, c, d := buildInfo()
	return fmt.Sprintf("outbox-relay %s\ncommit: %s\nbuilt: %s\ngo: %s %s/%s\n",
		v, c, d, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
