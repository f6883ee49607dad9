// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// go.mod states the lowest Go version the module needs, the highest its dependencies ask
// for: a higher one (a patch release such as 1.26.8) forces every importer to upgrade.
func TestGoModStatesTheLowestGoVersion(t *testing.T) {
	t.Parallel()
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(goBin, "list", "-m", "-f", "{{if .Main}}main {{end}}{{.Path}} {{.GoVersion}}", "all").Output()
	if err != nil {
		t.Fatalf("go list -m all: %v", err)
	}
	var main, need, needBy string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch {
		case f[0] == "main":
			main = f[2]
		case len(f) == 2 && goLess(need, f[1]):
			need, needBy = f[1], f[0]
		}
	}
	if main != need {
		t.Fatalf("go.mod says go %s; the dependencies need go %s (%s): state that", main, need, needBy)
	}
	b, err := os.ReadFile("../../go.mod")
	if err != nil || !strings.Contains(string(b), "\ngo "+need+"\n") {
		t.Fatalf("go.mod does not say go %s (%v)", need, err)
	}
}

// goLess orders Go versions (1.25 < 1.25.0 < 1.25.1 < 1.26); "" is lowest.
func goLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		if i >= len(pa) || a == "" {
			return true
		}
		if i >= len(pb) {
			return false
		}
		x, _ := strconv.Atoi(pa[i])
		y, _ := strconv.Atoi(pb[i])
		if x != y {
			return x < y
		}
	}
	return false
}
