// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A function over the limit is listed with its receiver's type, test files are not read, and
// the allow list fails on a long function it does not name and on a name no longer long.
func TestFuncLen(t *testing.T) {
	dir := t.TempDir()
	src := "package p\n\ntype T struct{}\n\nfunc (t *T) Long() {\n" + strings.Repeat("\t_ = 1\n", 9) + "}\n\nfunc Short() {}\n"
	for name, text := range map[string]string{"p.go": src, "p_test.go": strings.ReplaceAll(src, "Long", "TestLong")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	found, err := scan(dir+"/...", 10)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.ToSlash(filepath.Join(dir, "p.go"))
	if len(found) != 1 || found[0] != (long{file: file, line: 5, name: "T.Long", lines: 11}) {
		t.Fatalf("found %+v", found)
	}
	if p := judge(found, map[string]bool{file + " T.Long": true}, 10); len(p) != 0 {
		t.Errorf("allowed: %v", p)
	}
	if p := judge(found, nil, 10); len(p) != 1 || !strings.Contains(p[0], "T.Long is 11 lines") {
		t.Errorf("not allowed: %v", p)
	}
	if p := judge(nil, map[string]bool{file + " T.Long": true}, 10); len(p) != 1 || !strings.Contains(p[0], "take it off") {
		t.Errorf("stale: %v", p)
	}
}
