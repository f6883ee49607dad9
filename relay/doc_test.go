// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docFileRef is a file named in the package documentation, "pipeline/plan.go (plan,
// laneOf)": its path as written and the identifiers given in the parentheses.
var docFileRef = regexp.MustCompile(`([\w./]+\.go)(?: \(([^()]*)\))?`)

// goIdent matches a Go identifier.
var goIdent = regexp.MustCompile(`^[A-Za-z_]\w*$`)

// docDirs maps the prefixes the package documentation writes paths with to the directories
// they name, from the repository's root; a bare file name is in package relay.
var docDirs = []struct{ prefix, dir string }{
	{"relay/internal/pipeline/", "relay/internal/pipeline"},
	{"pipeline/", "relay/internal/pipeline"},
	{"internal/lease/", "relay/internal/lease"},
	{"relay/rocketmq/", "relay/rocketmq"},
	{"rocketmq/", "relay/rocketmq"},
	{"metrics/", "relay/metrics"},
	{"internal/outboxsql/", "internal/outboxsql"},
	{"schema/", "schema"},
	{"", "relay"},
}

// TestDocNamesTheFilesAndFunctionsOfTheCode keeps the row's path and the guarantees in the
// package documentation true: every file it names exists, and every identifier it names in
// parentheses after a file ("scan.go (scan, ReadPage)") is declared in that file.
func TestDocNamesTheFilesAndFunctionsOfTheCode(t *testing.T) {
	text := packageDoc(t)
	refs := docFileRef.FindAllStringSubmatch(strings.Join(strings.Fields(text), " "), -1)
	if len(refs) < 20 {
		t.Fatalf("the package documentation names %d files; expected the row's path and the guarantees", len(refs))
	}
	for _, ref := range refs {
		path := docPath(ref[1])
		decls, err := declaredIn(path)
		if err != nil {
			t.Errorf("doc.go names %s: %v", ref[1], err)
			continue
		}
		for _, name := range docNames(ref[2]) {
			if !decls[name] {
				t.Errorf("doc.go names %s in %s, which does not declare it", name, ref[1])
			}
		}
	}
}

// packageDoc returns the text of the package comment in doc.go.
func packageDoc(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil || f.Doc == nil {
		t.Fatalf("doc.go: no package comment (%v)", err)
	}
	return f.Doc.Text()
}

// docPath returns the path, from this package's directory, of a file as the documentation
// writes it.
func docPath(written string) string {
	for _, d := range docDirs {
		if rest, ok := strings.CutPrefix(written, d.prefix); ok && (d.prefix != "" || !strings.Contains(rest, "/")) {
			return filepath.Join("..", d.dir, rest)
		}
	}
	return filepath.Join("..", written)
}

// docNames returns the identifiers of a parenthesis: each comma-separated item's last word
// ("the rules in parkBook": parkBook), its part after a dot ("Store.MarkSent": MarkSent).
func docNames(list string) []string {
	var names []string
	for _, item := range strings.Split(strings.ReplaceAll(list, " and ", ", "), ",") {
		words := strings.Fields(item)
		if len(words) == 0 {
			continue
		}
		name := words[len(words)-1]
		if i := strings.LastIndex(name, "."); i >= 0 {
			name = name[i+1:]
		}
		if goIdent.MatchString(name) {
			names = append(names, name)
		}
	}
	return names
}

// declaredIn returns the functions, methods and types declared in the Go file at path.
func declaredIn(path string) (map[string]bool, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, err
	}
	decls := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			decls[d.Name.Name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				if ts, ok := s.(*ast.TypeSpec); ok {
					decls[ts.Name.Name] = true
				}
			}
		}
	}
	return decls, nil
}
