// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every outbox-relay command line of docs/adopting.md names a command and flags the binary
// has: a user following the page never meets "unknown flag". (TestAdoptionPathEndToEnd in
// internal/brokersuite runs the steps themselves.)
func TestAdoptingDocCommands(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/adopting.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	seen := 0
	for _, blk := range blocks {
		text := strings.ReplaceAll(blk[1], "\\\n", " ")
		for _, line := range strings.Split(text, "\n") {
			i := strings.Index(line, "outbox-relay ")
			if i < 0 {
				continue
			}
			args := strings.Fields(line[i+len("outbox-relay "):])
			root := (&app{}).newRootCmd()
			cmd, rest, err := root.Find(args)
			if err != nil {
				t.Errorf("docs/adopting.md: %q: %v", line, err)
				continue
			}
			for _, a := range rest {
				if !strings.HasPrefix(a, "--") {
					continue
				}
				name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if cmd.Flags().Lookup(name) == nil && cmd.InheritedFlags().Lookup(name) == nil {
					t.Errorf("docs/adopting.md: %q: %s has no flag --%s", line, cmd.CommandPath(), name)
				}
			}
			seen++
		}
	}
	if seen < 6 {
		t.Fatalf("only %d outbox-relay command lines found in docs/adopting.md", seen)
	}
}

// The classic local-message table shown in docs/adopting.md is the one the migration tests
// upgrade (schema/testdata/classicrelay.sql), its COMMENT clauses aside.
func TestAdoptingDocShowsTheClassicTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/adopting.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- classic-local-message-ddl -->\n```sql\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/adopting.md has no classic-local-message-ddl block")
	}
	tested, err := os.ReadFile("../../schema/testdata/classicrelay.sql")
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(` COMMENT[ =]'[^']*'`).ReplaceAllString(string(tested), "")
	if strings.TrimSpace(string(m[1])) != strings.TrimSpace(want) {
		t.Errorf("docs/adopting.md's classic table:\n%s\nthe tested one without comments:\n%s", m[1], want)
	}
}
