// SPDX-License-Identifier: Apache-2.0

// Command funclen lists the functions longer than -max lines (from the func keyword to the
// closing brace) in the non-test Go files under its arguments, one per line as
// "file:line name length". An argument ending in /... is walked recursively. With -allow, a
// file of "file name" lines (# comments allowed), it exits 1 when a function not listed there
// is too long, or a listed one is no longer too long (so the list stays true). `make lint`
// runs it over the whole module.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// long is one function over the limit.
type long struct {
	file  string
	line  int
	name  string
	lines int
}

func (l long) key() string { return l.file + " " + l.name }

func main() {
	maxLines := flag.Int("max", 80, "longest function allowed, in lines")
	allowFile := flag.String("allow", "", "file of `file name` lines: functions allowed to be longer")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		args = []string{"./..."}
	}
	var found []long
	for _, arg := range args {
		ls, err := scan(arg, *maxLines)
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen:", err)
			os.Exit(2)
		}
		found = append(found, ls...)
	}
	if *allowFile == "" {
		for _, l := range found {
			fmt.Printf("%s:%d %s %d\n", l.file, l.line, l.name, l.lines)
		}
		return
	}
	allowed, err := readAllow(*allowFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	problems := judge(found, allowed, *maxLines)
	for _, p := range problems {
		fmt.Fprintln(os.Stderr, p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// judge returns a line for each function too long and not allowed, and for each allowed one
// that is no longer too long.
func judge(found []long, allowed map[string]bool, maxLines int) []string {
	var problems []string
	seen := map[string]bool{}
	for _, l := range found {
		seen[l.key()] = true
		if !allowed[l.key()] {
			problems = append(problems, fmt.Sprintf("%s:%d: %s is %d lines, over %d: split it", l.file, l.line, l.name, l.lines, maxLines))
		}
	}
	var stale []string
	for k := range allowed {
		if !seen[k] {
			stale = append(stale, fmt.Sprintf("funclen: %q is allowed but not over %d lines (or gone): take it off the list", k, maxLines))
		}
	}
	sort.Strings(stale)
	return append(problems, stale...)
}

// readAllow reads a list of "file name" lines.
func readAllow(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s: want \"file name\", got %q", path, line)
		}
		out[fields[0]+" "+fields[1]] = true
	}
	return out, sc.Err()
}

// scan lists the long functions of the Go files of dir, or of the tree under it when arg
// ends in "/...". Test files, testdata and hidden directories are left out.
func scan(arg string, maxLines int) ([]long, error) {
	dir, recursive := strings.CutSuffix(arg, "/...")
	if arg == "..." {
		dir, recursive = ".", true
	}
	var out []long
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			base := d.Name()
			if path != dir && (!recursive || base == "testdata" || strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		ls, err := scanFile(path, maxLines)
		out = append(out, ls...)
		return err
	})
	return out, err
}

// scanFile lists the functions of one file longer than maxLines.
func scanFile(path string, maxLines int) ([]long, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []long
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
		if n := end - start + 1; n > maxLines {
			out = append(out, long{file: filepath.ToSlash(path), line: start, name: funcName(fn), lines: n})
		}
	}
	return out, nil
}

// funcName is fn's name, with its receiver's type for a method: "Publisher.classify".
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}
