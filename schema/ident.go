package schema

import (
	"fmt"
	"regexp"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// ValidateIdent reports whether name is safe to use unquoted as a table name: ASCII
// letters, digits and underscores, not starting with a digit, at most 64 characters.
// The rule is stricter than MySQL's so that a name never needs quoting or escaping.
func ValidateIdent(name string) error {
	if name == "" {
		return fmt.Errorf("table name is empty")
	}
	if !identRE.MatchString(name) {
		return fmt.Errorf("table name %q is not a plain SQL identifier (letters, digits and _, not starting with a digit, at most 64 characters)", name)
	}
	return nil
}

// QuoteIdent returns name quoted with backticks for use in SQL, so that a table named after a
// reserved word (order, group) works. name must have passed ValidateIdent, which admits no
// backtick.
func QuoteIdent(name string) string {
	return "`" + name + "`"
}
