// SPDX-License-Identifier: Apache-2.0

package schema

import (
	"fmt"
	"regexp"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidateIdent reports whether name is acceptable as a table name: ASCII letters, digits
// and underscores, not starting with a digit, at most 64 characters. Such a name never needs
// escaping, but it may be a reserved word (order, group): always write it with QuoteIdent.
func ValidateIdent(name string) error {
	if name == "" {
		return fmt.Errorf("table name is empty")
	}
	if !identRE.MatchString(name) {
		return fmt.Errorf("table name %q is not a plain SQL identifier (letters, digits and _, not starting with a digit, at most 64 characters)", name)
	}
	return nil
}

// QuoteIdent returns name quoted with backticks for use in SQL, so that a reserved word such
// as order works as a table name. name must have passed ValidateIdent (it then holds no
// backtick to escape).
func QuoteIdent(name string) string {
	return "`" + name + "`"
}
