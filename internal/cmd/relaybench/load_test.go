// SPDX-License-Identifier: Apache-2.0

package main

import (
	"slices"
	"testing"
	"time"
)

// --audit off,on --repeat N runs outbox-relay with the audit off and on in turn, N pairs,
// setting audit.enabled explicitly both ways (never left to the default); the classic relay
// has no audit and runs once per round.
func TestLoadAuditPairsInterleaved(t *testing.T) {
	f, err := parseLoadFlags([]string{"-algos", "outbox-relay,classic", "-polls", "200ms", "-relays", "1",
		"-audit", "off,on", "-repeat", "3", "-audit-min-age", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range f.scenarios() {
		got = append(got, sc.algo+"/"+sc.audit)
	}
	pair := []string{algoRelay + "/off", algoRelay + "/on", algoSeed + "/"}
	if want := slices.Concat(pair, pair, pair); !slices.Equal(got, want) {
		t.Errorf("scenarios %q, want %q", got, want)
	}
	on := auditEnv(scenario{algo: algoRelay, audit: "on"}, f.auditMinAge)
	off := auditEnv(scenario{algo: algoRelay, audit: "off"}, f.auditMinAge)
	if !slices.Equal(on, []string{"OUTBOX_AUDIT_ENABLED=true", "OUTBOX_AUDIT_MIN_AGE=2s"}) || !slices.Equal(off, []string{"OUTBOX_AUDIT_ENABLED=false"}) {
		t.Errorf("audit on: %q, off: %q; want audit.enabled set explicitly both ways", on, off)
	}
	if f.auditMinAge != 2*time.Second {
		t.Errorf("--audit-min-age read as %s", f.auditMinAge)
	}
	for _, bad := range [][]string{{"-audit", "yes"}, {"-repeat", "0"}} {
		if _, err := parseLoadFlags(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
