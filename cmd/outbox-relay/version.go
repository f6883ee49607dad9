// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Build information, set with -ldflags "-X main.version=... -X main.commit=... -X main.date=..."
// (see the Makefile's build target).
var (
	version = "dev"
	commit  = ""
	date    = ""
)

// buildInfo fills what -ldflags left empty from what the Go toolchain recorded in the binary.
func buildInfo() (v, c, d string) {
	bi, _ := debug.ReadBuildInfo()
	return stamps(version, commit, date, bi)
}

// stamps completes the -ldflags stamps v, c, d from bi (nil when the binary has none): the
// module version that `go install .../cmd/outbox-relay@v0.1.0` (or `go build` in a tagged
// checkout) records as Main.Version, and the vcs.revision and vcs.time of a build in a
// checkout. A pseudo-version (v0.0.0-20261127120000-0123456789ab) carries a commit prefix,
// which serves when no vcs.revision was recorded (a module fetched through a proxy has none).
func stamps(v, c, d string, bi *debug.BuildInfo) (string, string, string) {
	if bi != nil {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && c == "":
				c = s.Value
			case s.Key == "vcs.time" && d == "":
				d = s.Value
			}
		}
		if c == "" {
			c = pseudoRevision(bi.Main.Version)
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

// pseudoRevision returns the commit prefix of a Go pseudo-version, or "".
func pseudoRevision(v string) string {
	v = strings.TrimSuffix(v, "+dirty")
	i := strings.LastIndexByte(v, '-')
	if i < 0 || len(v)-i-1 != 12 || !pseudoTime.MatchString(v[:i]) {
		return ""
	}
	return v[i+1:]
}

// pseudoTime matches a pseudo-version up to its timestamp (yyyymmddhhmmss).
var pseudoTime = regexp.MustCompile(`^v\d+\.\d+\.\d+-(?:.*\.)?(?:0\.)?\d{14}$`)

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
