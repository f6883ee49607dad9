// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docs/cli.md describes the binary: a section per command naming each of its flags, the
// global flags in their own section, and no flag or command the binary does not have.
func TestCLIDocMatchesTheBinary(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // command path (without the binary's name) -> text
	var global string
	heading := regexp.MustCompile("^### `([a-z ]+)")
	cur := ""
	for _, part := range regexp.MustCompile(`(?m)^(?:## |### )`).Split(string(b), -1) {
		switch m := heading.FindStringSubmatch("### " + part); {
		case m != nil:
			cur = strings.TrimSpace(m[1])
			sections[cur] = part
		case strings.HasPrefix(part, "Global flags"):
			global = part
			cur = ""
		}
	}
	if global == "" {
		t.Fatal("docs/cli.md has no Global flags section")
	}
	flagRE := regexp.MustCompile("`--([a-z][a-z-]*)")
	documented := func(text string) map[string]bool {
		out := map[string]bool{}
		for _, m := range flagRE.FindAllStringSubmatch(text, -1) {
			out[m[1]] = true
		}
		return out
	}

	root := (&app{}).newRootCmd()
	root.InitDefaultHelpFlag()
	root.InitDefaultVersionFlag() // cobra adds --version when it executes
	rootFlags := map[string]bool{"help": true}
	root.LocalFlags().VisitAll(func(f *pflag.Flag) { rootFlags[f.Name] = true })
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) { rootFlags[f.Name] = true })
	inGlobal := documented(global)
	for name := range rootFlags {
		if name != "help" && !inGlobal[name] {
			t.Errorf("docs/cli.md: global flag --%s is not in Global flags", name)
		}
	}
	for name := range inGlobal {
		if !rootFlags[name] {
			t.Errorf("docs/cli.md: Global flags names --%s, which the binary does not have", name)
		}
	}

	seen := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			path := strings.TrimPrefix(sub.CommandPath(), root.Name()+" ")
			text, ok := sections[path]
			seen[path] = true
			if !ok {
				if !sub.HasSubCommands() { // a group such as dead is documented by its subcommands
					t.Errorf("docs/cli.md has no section ### `%s`", path)
				}
				walk(sub)
				continue
			}
			inDoc := documented(text)
			own := map[string]bool{}
			sub.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				own[f.Name] = true
				if !inDoc[f.Name] {
					t.Errorf("docs/cli.md: %s does not document --%s", path, f.Name)
				}
			})
			for name := range inDoc {
				if !own[name] && !rootFlags[name] {
					t.Errorf("docs/cli.md: %s documents --%s, which it does not have", path, name)
				}
			}
			walk(sub)
		}
	}
	walk(root)
	for path := range sections {
		if !seen[path] {
			t.Errorf("docs/cli.md documents `%s`, which the binary does not have", path)
		}
	}
}
