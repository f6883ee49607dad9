// SPDX-License-Identifier: Apache-2.0

// Command testsummary reads `go test -json` from stdin and writes what `go test` would have
// written without -json (package results, the output of failed tests), then, unless CI is
// "true" (where a skip already fails the test), the list of skipped tests with their reasons:
// a run that prints "ok" while its real-broker tests skipped says so at the end. `make test`
// pipes its `go test` through it; the exit status stays go test's (set -o pipefail).
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// event is one line of test2json's output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is a skipped test and the lines it logged.
type skip struct {
	name   string
	reason []string
}

func main() {
	skips, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if os.Getenv("CI") != "true" {
		report(os.Stdout, skips)
	}
}

// summarize copies the non-verbose view of the events in r to w and returns the skips.
func summarize(r io.Reader, w io.Writer) ([]skip, error) {
	var skips []skip
	buffered := map[string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: a build error, say
			continue
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Test == "" && e.Action == "output":
			fmt.Fprint(w, e.Output)
		case e.Action == "output":
			buffered[key] = append(buffered[key], e.Output)
		case e.Action == "fail" && e.Test != "":
			fmt.Fprint(w, strings.Join(buffered[key], ""))
			delete(buffered, key)
		case e.Action == "skip" && e.Test != "":
			skips = append(skips, skip{name: e.Package + "." + e.Test, reason: reasons(buffered[key])})
			delete(buffered, key)
		case e.Action == "pass":
			delete(buffered, key)
		}
	}
	return skips, sc.Err()
}

// reasons keeps a skipped test's own lines (t.Skip's message), not the framework's.
func reasons(lines []string) []string {
	var out []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		out = append(out, t)
	}
	return out
}

// report lists the skipped tests, loudly, or says there were none.
func report(w io.Writer, skips []skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "testsummary: no test skipped")
		return
	}
	fmt.Fprintf(w, "\n==== %d TEST(S) SKIPPED: what they check was NOT tested on this run ====\n", len(skips))
	for _, s := range skips {
		fmt.Fprintf(w, "SKIP %s: %s\n", s.name, strings.Join(s.reason, " | "))
	}
	fmt.Fprintln(w, "==== (CI=true turns these skips into failures) ====")
}
