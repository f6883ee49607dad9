// SPDX-License-Identifier: Apache-2.0

// Package linkcheck checks the links of a repository's Markdown files offline: every
// relative link must name a file or directory that exists, and every #anchor one that its
// Markdown target defines, computed the way GitHub renders headings. Links with a scheme
// (https:, mailto:) are not fetched. `make lint` runs it over the repository
// (internal/cmd/linkcheck).
package linkcheck

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Problem is one broken link: where it is and why it does not resolve.
type Problem struct {
	File   string // slash-separated, relative to the checked root
	Line   int
	Target string
	Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Target, p.Reason)
}

// skipDirs are never walked: VCS data, installed packages, build outputs and test fixtures
// (which hold broken links on purpose).
var skipDirs = []string{".git", "node_modules", "bin", "dist", "testdata", "vendor"}

// Check walks root and returns the broken links of every .md file under it, in file order.
func Check(root string) ([]Problem, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && slices.Contains(skipDirs, d.Name()) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk %s: %w", root, err)
	}
	c := checker{root: root, anchors: map[string]map[string]bool{}}
	var problems []Problem
	for _, f := range files {
		ps, err := c.file(f)
		if err != nil {
			return nil, err
		}
		problems = append(problems, ps...)
	}
	return problems, nil
}

type checker struct {
	root    string
	anchors map[string]map[string]bool // by slash path relative to root
}

// file checks the links of one Markdown file.
func (c *checker) file(name string) ([]Problem, error) {
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(name)))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	var problems []Problem
	for _, l := range links(src) {
		if reason := c.resolve(name, l.target); reason != "" {
			problems = append(problems, Problem{File: name, Line: l.line, Target: l.target, Reason: reason})
		}
	}
	return problems, nil
}

// resolve returns why target, written in file from, does not resolve, or "".
func (c *checker) resolve(from, target string) string {
	if hasScheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // external: not fetched
	}
	file, anchor, _ := strings.Cut(target, "#")
	if q := strings.IndexByte(file, '?'); q >= 0 {
		file = file[:q]
	}
	to := from
	if file != "" {
		if strings.HasPrefix(file, "/") {
			to = path.Clean(strings.TrimPrefix(file, "/"))
		} else {
			to = path.Join(path.Dir(from), file)
		}
		if to == ".." || strings.HasPrefix(to, "../") {
			return "leaves the repository"
		}
		if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(to))); err != nil {
			return "no such file or directory"
		}
	}
	if anchor == "" || !strings.HasSuffix(to, ".md") {
		return "" // anchors of source files (#L10) are GitHub's line numbers
	}
	set, err := c.anchorsOf(to)
	if err != nil {
		return err.Error()
	}
	if !set[anchor] {
		return fmt.Sprintf("no heading or anchor %q in %s", anchor, to)
	}
	return ""
}

// anchorsOf returns the anchors a Markdown file defines, cached.
func (c *checker) anchorsOf(name string) (map[string]bool, error) {
	if a, ok := c.anchors[name]; ok {
		return a, nil
	}
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(name)))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	a := Anchors(src)
	c.anchors[name] = a
	return a, nil
}

var hasScheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// Anchors returns the anchors GitHub gives a Markdown document: one per heading (its slug,
// with -1, -2, ... for repeats) and the id or name of every HTML anchor element.
func Anchors(src []byte) map[string]bool {
	set := map[string]bool{}
	seen := map[string]int{}
	for _, l := range scan(src) {
		for _, m := range htmlAnchor.FindAllSubmatch([]byte(l.text), -1) {
			set[string(m[1])] = true
		}
		if l.heading == "" {
			continue
		}
		s := Slug(l.heading)
		if n := seen[s]; n > 0 {
			set[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			set[s] = true
		}
		seen[s]++
	}
	return set
}

var htmlAnchor = regexp.MustCompile(`<a\s+(?:[^>]*\s)?(?:id|name)="([^"]+)"`)

// Slug is GitHub's anchor for a heading: its text without Markdown markup, lower-cased,
// with every character but letters, digits, spaces, hyphens and underscores removed and
// spaces turned into hyphens.
func Slug(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)

// link is one link target and its line.
type link struct {
	line   int
	target string
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef     = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?`)
	htmlHref   = regexp.MustCompile(`<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"`)
	codeSpan   = regexp.MustCompile("`+[^`]*`+")
)

// links returns the link targets of a Markdown document outside code blocks and code spans.
func links(src []byte) []link {
	var out []link
	for _, l := range scan(src) {
		text := codeSpan.ReplaceAllString(l.text, "")
		var targets []string
		for _, re := range []*regexp.Regexp{inlineLink, htmlHref} {
			for _, m := range re.FindAllStringSubmatch(text, -1) {
				targets = append(targets, m[1])
			}
		}
		if m := refDef.FindStringSubmatch(text); m != nil {
			targets = append(targets, m[1])
		}
		for _, t := range targets {
			out = append(out, link{line: l.n, target: t})
		}
	}
	return out
}

// line is one line of a Markdown document outside fenced code, with its heading text if it
// is an ATX heading.
type line struct {
	n       int
	text    string
	heading string
}

var atxHeading = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$`)

// scan returns the lines of src outside fenced code blocks.
func scan(src []byte) []line {
	var out []line
	var fence string
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		t := sc.Text()
		trimmed := strings.TrimLeft(t, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			continue
		}
		l := line{n: n, text: t}
		if m := atxHeading.FindStringSubmatch(t); m != nil {
			l.heading = m[1]
		}
		out = append(out, l)
	}
	return out
}
