// SPDX-License-Identifier: Apache-2.0

// Command linkcheck checks every relative link and #anchor of the Markdown files under a
// directory (default: the current one) and exits 1 listing the broken ones. `make lint`
// runs it over the repository.
package main

import (
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/linkcheck"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	problems, err := linkcheck.Check(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linkcheck:", err)
		os.Exit(2)
	}
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "linkcheck: %d broken link(s)\n", len(problems))
		os.Exit(1)
	}
}
