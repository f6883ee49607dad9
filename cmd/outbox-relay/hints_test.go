// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// TestMalformedDSNNamesTheExpectedForm: the driver's own message for a DSN without tcp(...)
// ("default addr for network ... unknown") says nothing of what to write; the CLI names the
// form, and never echoes the password.
func TestMalformedDSNNamesTheExpectedForm(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{
		"user:Secret1@127.0.0.1:13306/x",
		"mysql://user:Secret1@127.0.0.1:13306/x",
		"user:Secret1@db:3306/x",
	} {
		for _, cmd := range []string{"status", "migrate", "run", "dead list", "purge --older-than=7d"} {
			args := append(strings.Fields(cmd), "--mysql-dsn="+dsn)
			r := cli(t, "", false, args...)
			if r.code != exitUsage || !strings.Contains(r.errOut, "user:password@tcp(host:port)/db") {
				t.Errorf("%s with %q: code %d, stderr %q; want exit 2 naming user:password@tcp(host:port)/db", cmd, dsn, r.code, r.errOut)
			}
			if strings.Contains(r.errOut, "Secret1") {
				t.Errorf("%s with %q: stderr leaks the password: %q", cmd, dsn, r.errOut)
			}
		}
	}
	r := cli(t, "", false, "status", "--mysql-dsn=mysql://user:Secret1@127.0.0.1:13306/x")
	if !strings.Contains(r.errOut, "a mysql:// URL is not a DSN") {
		t.Errorf("a mysql:// URL: stderr %q; want it to say a URL is not a DSN", r.errOut)
	}
}

// TestMissingTableSaysRunMigrate: every command reading the outbox table on a database where
// migrate never ran says what to run, not only the server's error 1146.
func TestMissingTableSaysRunMigrate(t *testing.T) {
	t.Parallel()
	db := testenv.MySQL(t)
	dsn := "--mysql-dsn=" + db.DSN
	for _, args := range [][]string{
		{"status"},
		{"status", "--json"},
		{"dead", "list"},
		{"purge", "--older-than=7d"},
		{"requeue", "--msg-id=m-1", "--yes"},
		{"requeue", "--all-dead", "--yes"},
	} {
		r := cli(t, "", false, append(args, dsn)...)
		if r.code != exitRuntime || !strings.Contains(r.errOut, "run `outbox-relay migrate`") {
			t.Errorf("%v on a database without the table: code %d, stderr %q; want exit 1 and \"run `outbox-relay migrate`\"", args, r.code, r.errOut)
		}
	}
}
