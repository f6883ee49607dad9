package main

import (
	"os"
	"path/filepath"
	"regexp"
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
