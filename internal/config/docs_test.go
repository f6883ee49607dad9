// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// The example file documents every key with its default: loading it must give the defaults.
func TestExampleFileIsTheDefaults(t *testing.T) {
	t.Parallel()
	// mysql.dsn has no default: the file shows it commented out, to be filled in.
	v := NewViper()
	v.SetDefault(KeyMySQLDSN, testDSN)
	c, err := Load(v, "../../config.example.yaml")
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	want := Default()
	want.MySQL.DSN = testDSN
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("config.example.yaml differs from the defaults:\n%s\nwant\n%s", c, Default())
	}
	b, _ := os.ReadFile("../../config.example.yaml")
	for _, k := range Keys() {
		leaf := k[strings.LastIndex(k, ".")+1:]
		if !strings.Contains(string(b), leaf+":") {
			t.Errorf("config.example.yaml does not show %s", k)
		}
	}
}

// docs/configuration.md names every key, its environment variable and its flag.
func TestConfigurationDocCoversEveryKey(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, k := range Keys() {
		if !strings.Contains(doc, "| `"+k+"` |") {
			t.Errorf("docs/configuration.md has no row for %s", k)
		}
		if k != KeyRoutes && !strings.Contains(doc, "`"+EnvName(k)+"`") {
			t.Errorf("docs/configuration.md does not name %s", EnvName(k))
		}
		if f := FlagName(k); f != "" && !strings.Contains(doc, "`--"+f+"`") {
			t.Errorf("docs/configuration.md does not name --%s for %s", f, k)
		}
	}
	// String defaults are shown as they are.
	for _, d := range defaults {
		i := strings.Index(doc, "| `"+d.key+"` |")
		if v, ok := d.val.(string); ok && v != "" && i >= 0 {
			row := doc[i:]
			row = row[:strings.Index(row, "\n")]
			if !strings.Contains(row, "| `"+v+"` |") {
				t.Errorf("docs/configuration.md: the default of %s is %q, the row says:\n%s", d.key, v, row)
			}
		}
	}
}
