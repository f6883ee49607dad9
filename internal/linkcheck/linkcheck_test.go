// SPDX-License-Identifier: Apache-2.0

package linkcheck

import (
	"slices"
	"strings"
	"testing"
)

// TestCheckFindsBrokenLinksAndAnchors: a fixture with working links of every kind and one
// broken link of every kind; exactly the broken ones are reported, with their lines.
func TestCheckFindsBrokenLinksAndAnchors(t *testing.T) {
	problems, err := Check("testdata/site")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		`README.md:5: docs/guide.md#no-such-section: no heading or anchor "no-such-section" in docs/guide.md`,
		`README.md:5: docs/missing.md: no such file or directory`,
		`README.md:6: #nowhere: no heading or anchor "nowhere" in README.md`,
		`README.md:6: docs/gone.md: no such file or directory`,
		`README.md:16: docs/guide.md#not-there: no heading or anchor "not-there" in docs/guide.md`,
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSlugIsGitHubs: headings as GitHub anchors them.
func TestSlugIsGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"Failure accounting (issues 9 and 21)":     "failure-accounting-issues-9-and-21",
		"Set up `lock.key` and [Redis](https://x)": "set-up-lockkey-and-redis",
		"Broker down":             "broker-down",
		"What `make demo` shows":  "what-make-demo-shows",
		"Choosing the dedupe key": "choosing-the-dedupe-key",
		"Transactional messages in Java (TransactionMQProducer)": "transactional-messages-in-java-transactionmqproducer",
		"max_retry_count — the budget":                           "max_retry_count--the-budget",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestRepositoryLinks: every relative link and anchor in the repository's Markdown resolves.
func TestRepositoryLinks(t *testing.T) {
	problems, err := Check("../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
