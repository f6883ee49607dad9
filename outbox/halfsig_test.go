// SPDX-License-Identifier: Apache-2.0

package outbox

import "testing"

// The signature of a half, with the vector docs/security.md gives for writers in other
// languages (the Java recipe computes the same); a tampered field or another secret fails.
func TestSignHalf(t *testing.T) {
	const want = "d1d1c0620831c40ecdb82b55fcad87132248fdbcdb6438a4e256bbe98f916cbc"
	sig := SignHalf("s3cret-0123456789", "local_message", "m-1", "Orders")
	if sig != want {
		t.Fatalf("SignHalf = %s, want %s", sig, want)
	}
	if !VerifyHalf([]string{"old-secret-0123456", "s3cret-0123456789"}, sig, "local_message", "m-1", "Orders") {
		t.Fatal("a valid signature under the second secret was refused")
	}
	for _, c := range [][4]string{
		{"s3cret-0123456789", "local_message", "m-2", "Orders"},
		{"s3cret-0123456789", "local_message", "m-1", "Other"},
		{"s3cret-0123456789", "other_table", "m-1", "Orders"},
		{"another-secret-01", "local_message", "m-1", "Orders"},
	} {
		if VerifyHalf([]string{c[0]}, sig, c[1], c[2], c[3]) {
			t.Fatalf("signature accepted for %v", c)
		}
	}
	if VerifyHalf([]string{"s3cret-0123456789"}, "", "local_message", "m-1", "Orders") || VerifyHalf(nil, sig, "local_message", "m-1", "Orders") {
		t.Fatal("an empty signature or no secret was accepted")
	}
}
