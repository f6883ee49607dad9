// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/sql-recipes.md lists the reserved property names where consumers and plain-SQL writers
// look: exactly the names and name prefixes the writer refuses and the relay parks dead.
func TestReservedPropertiesDocumented(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/sql-recipes.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i := strings.Index(doc, "are **reserved**")
	j := strings.Index(doc, "(`TestReservedPropertiesDocumented`")
	if i < 0 || j < i {
		t.Fatal("docs/sql-recipes.md has no list of reserved property names")
	}
	var listed []string
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(doc[i:j], -1) {
		listed = append(listed, m[1])
	}
	var want []string
	for k := range reservedProperties {
		if !coveredByPrefix(k) {
			want = append(want, k)
		}
	}
	want = append(want, reservedPrefixes...)
	slices.Sort(listed)
	listed = slices.Compact(listed)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("docs/sql-recipes.md lists %v\nthe writer reserves %v", listed, want)
	}
}

// coveredByPrefix reports whether name belongs to a reserved family other than as the
// family's prefix itself: the docs name the family once.
func coveredByPrefix(name string) bool {
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(name, p) && name != p {
			return true
		}
	}
	return false
}
