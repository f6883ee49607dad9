// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// No documented command puts a password on a command line, where ps and shell history show
// it to every user of the host (issue 23, row 10).
func TestDocsPutNoPasswordOnACommandLine(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../docs/*.md")
	files = append(files, "../../README.md")
	secretFlag := regexp.MustCompile(`--mysql-dsn[ =]['"]?[^'" ]*:[^@'" ]+@|--redis-password|redis-cli [^\n]*-a `)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if m := secretFlag.Find(b); m != nil {
			t.Errorf("%s puts a password on a command line: %s", f, m)
		}
	}
}

// docs/security.md ties each defence to a test: every test it names exists.
func TestSecurityDocNamesRealTests(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	names := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllSubmatch(doc, -1)
	if len(names) < 10 {
		t.Fatalf("docs/security.md names %d tests", len(names))
	}
	defined := map[string]bool{}
	err = filepath.WalkDir("../..", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range regexp.MustCompile(`(?m)^func (Test\w+)\(`).FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if !defined[string(n[1])] {
			t.Errorf("docs/security.md names %s, which no test file defines", n[1])
		}
	}
}
