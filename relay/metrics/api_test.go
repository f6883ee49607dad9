// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"slices"
	"strings"
	"testing"
)

// The package's exported surface is what a user holds and reads: constructing and
// registering the metrics, the build info, the activity minutes. The relay's own writers
// (a table's counts and gauges) are not in it (relay/internal/recorder), so no code outside
// the module can add a count the relay did not make.
func TestExportsOnlyWhatUsersHold(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range pkgs["metrics"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if s, ok := recv.(*ast.StarExpr); ok {
						recv = s.X
					}
					name = recv.(*ast.Ident).Name + "." + name
				}
				got = append(got, name)
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.IsExported() {
						got = append(got, "type "+ts.Name.Name)
					}
				}
			}
		}
	}
	slices.Sort(got)
	want := []string{
		"Metrics.Activity", "Metrics.ConnectionWatch", "Metrics.SentUnreplicated", "Metrics.SetBuildInfo", "Metrics.SetClock",
		"NewMetrics", "NewMetricsWith",
		"type Metrics", "type MetricsOptions", "type MinuteActivity",
	}
	if !slices.Equal(got, want) {
		t.Errorf("package metrics exports\n  %v\nwant\n  %v", got, want)
	}
}
