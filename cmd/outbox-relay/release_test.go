// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// git runs git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Row 1 of issue 26: `make release` in a clone of the repository, as a maintainer runs it:
// it refuses a version without release notes and a dirty tree, then tags, builds the static
// binary with the version stamped, and writes checksums that verify.
func TestMakeRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release binary")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "repo")
	git(t, root, "clone", "-q", "--no-hardlinks", root, dir)
	release := func(version string) (string, error) {
		cmd := exec.Command("make", "--no-print-directory", "release", "VERSION="+version)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "RELEASE_PLATFORMS=linux/amd64", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := release("v9.9.9"); err == nil || !strings.Contains(out, `CHANGELOG.md has no "## [9.9.9]" section`) {
		t.Fatalf("release without notes: %v\n%s", err, out)
	}
	if out, err := release("9.9"); err == nil || !strings.Contains(out, "is not vMAJOR.MINOR.PATCH") {
		t.Fatalf("release of a bad version: %v\n%s", err, out)
	}
	changelog := filepath.Join(dir, "CHANGELOG.md")
	b, err := os.ReadFile(changelog)
	if err != nil {
		t.Fatal(err)
	}
	notes := strings.Replace(string(b), "## [Unreleased]", "## [Unreleased]\n\n## [v9.9.9] - 2026-11-25\n\n### Fixed\n- The release test's own notes.", 1)
	if err := os.WriteFile(changelog, []byte(notes), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := release("v9.9.9"); err == nil || !strings.Contains(out, "uncommitted changes") {
		t.Fatalf("release of a dirty tree: %v\n%s", err, out)
	}
	git(t, dir, "commit", "-q", "-am", "notes for v9.9.9")
	out, err := release("v9.9.9")
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(git(t, dir, "rev-list", "-n", "1", "v9.9.9")); got != strings.TrimSpace(git(t, dir, "rev-parse", "HEAD")) {
		t.Fatalf("tag v9.9.9 is %s, not HEAD", got)
	}
	dist := filepath.Join(dir, "dist", "v9.9.9")
	sum := exec.Command("sha256sum", "-c", "SHA256SUMS")
	sum.Dir = dist
	if out, err := sum.CombinedOutput(); err != nil || !strings.Contains(string(out), "outbox-relay_v9.9.9_linux_amd64.tar.gz: OK") {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	x := exec.Command("tar", "-xzf", "outbox-relay_v9.9.9_linux_amd64.tar.gz")
	x.Dir = dist
	if out, err := x.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	pkg := filepath.Join(dist, "outbox-relay_v9.9.9_linux_amd64")
	for _, f := range []string{"LICENSE", "README.md", "CHANGELOG.md"} {
		if _, err := os.Stat(filepath.Join(pkg, f)); err != nil {
			t.Errorf("the archive lacks %s", f)
		}
	}
	v, err := exec.Command(filepath.Join(pkg, "outbox-relay"), "version").CombinedOutput()
	if err != nil || !strings.Contains(string(v), "outbox-relay v9.9.9\n") {
		t.Fatalf("the released binary's version: %v\n%s", err, v)
	}
	if n, _ := os.ReadFile(filepath.Join(dist, "RELEASE_NOTES.md")); !strings.Contains(string(n), "The release test's own notes.") {
		t.Fatalf("RELEASE_NOTES.md:\n%s", n)
	}
}

// The Helm chart's default image is the one a release publishes: its appVersion (the image
// tag by default) is the newest version of CHANGELOG.md, spelt as `make release` tags the
// image (vX.Y.Z), and its repository the one docs/releasing.md pushes to.
func TestChartDefaultImageIsTheReleasedOne(t *testing.T) {
	t.Parallel()
	read := func(p string) string {
		b, err := os.ReadFile("../../" + p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+[^\]]*)\] - \d{4}-\d{2}-\d{2}$`).FindStringSubmatch(read("CHANGELOG.md"))
	if m == nil {
		t.Fatal("CHANGELOG.md has no released version (## [X.Y.Z] - YYYY-MM-DD)")
	}
	chart := read("deploy/helm/outbox-relay/Chart.yaml")
	if want := `appVersion: "v` + m[1] + `"`; !strings.Contains(chart, want) {
		t.Errorf("Chart.yaml lacks %s (the newest release in CHANGELOG.md, as make release tags it)", want)
	}
	repo := regexp.MustCompile(`(?m)^  repository: (\S+)$`).FindStringSubmatch(read("deploy/helm/outbox-relay/values.yaml"))
	if repo == nil || !strings.Contains(read("docs/releasing.md"), "--tag "+repo[1]+":vX.Y.Z") {
		t.Errorf("values.yaml's image.repository %v is not the repository docs/releasing.md pushes to", repo)
	}
}
