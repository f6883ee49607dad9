// SPDX-License-Identifier: Apache-2.0

package main

import (
	"runtime/debug"
	"testing"
)

// TestVersionStampsFromBuildInfo: a binary built without -ldflags (go install, go build)
// prints the version and commit the Go toolchain recorded, never "dev, commit unknown" when
// it knows better; -ldflags stamps (make build, make release, the image) still win.
func TestVersionStampsFromBuildInfo(t *testing.T) {
	t.Parallel()
	checkout := &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-11-27T12:00:00Z"},
	}}
	tests := []struct {
		name                string
		v, c, d             string
		bi                  *debug.BuildInfo
		wantV, wantC, wantD string
	}{
		{"go build in a tagged checkout", "dev", "", "", checkout,
			"v0.1.0", "0123456789abcdef0123456789abcdef01234567", "2026-11-27T12:00:00Z"},
		{"go install module@v0.1.0 (no VCS stamp)", "dev", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}},
			"v0.1.0", "unknown", "unknown"},
		{"go install module@commit (pseudo-version)", "dev", "", "",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.1.1-0.20261127120000-0123456789ab"}},
			"v0.1.1-0.20261127120000-0123456789ab", "0123456789ab", "unknown"},
		{"go build in an untagged, dirty checkout", "dev", "", "",
			&debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261127120000-0123456789ab+dirty"}},
			"v0.0.0-20261127120000-0123456789ab+dirty", "0123456789ab", "unknown"},
		{"go run or go test: (devel)", "dev", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"dev", "unknown", "unknown"},
		{"-ldflags win", "v0.2.0", "feedface", "2026-12-01T00:00:00Z", checkout,
			"v0.2.0", "feedface", "2026-12-01T00:00:00Z"},
		{"no build info", "dev", "", "", nil, "dev", "unknown", "unknown"},
	}
	for _, tt := range tests {
		v, c, d := stamps(tt.v, tt.c, tt.d, tt.bi)
		if v != tt.wantV || c != tt.wantC || d != tt.wantD {
			t.Errorf("%s: got %q %q %q, want %q %q %q", tt.name, v, c, d, tt.wantV, tt.wantC, tt.wantD)
		}
	}
}
