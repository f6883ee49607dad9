// SPDX-License-Identifier: Apache-2.0

package outboxsql

import "testing"

// TestParkedReasonNamesItsHead: the reason a parked row carries gives its head back, and
// no other reason (a failure's, an operator's) reads as one.
func TestParkedReasonNamesItsHead(t *testing.T) {
	if id, ok := ParkedHead(ParkedReason(9007199254740993)); !ok || id != 9007199254740993 {
		t.Fatalf("parkedHead(parkedReason(...)) = %d, %v", id, ok)
	}
	for _, reason := range []string{"", "parked behind id", "parked behind id x: y", "timeout (broker incident: attempt not counted)", "Parked behind id 3: no"} {
		if id, ok := ParkedHead(reason); ok {
			t.Errorf("parkedHead(%q) = %d, want no head", reason, id)
		}
	}
}
