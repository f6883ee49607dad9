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
// look: exactly the names the writer refuses and the relay parks dead.
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
	for _, m := range regexp.MustCompile("`([A-Z0-9_]+)`").FindAllStringSubmatch(doc[i:j], -1) {
		listed = append(listed, m[1])
	}
	var want []string
	for k := range reservedProperties {
		want = append(want, k)
	}
	slices.Sort(listed)
	slices.Sort(want)
	if !slices.Equal(listed, want) {
		t.Fatalf("docs/sql-recipes.md lists %v\nthe writer reserves %v", listed, want)
	}
}
