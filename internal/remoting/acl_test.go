// SPDX-License-Identifier: Apache-2.0

package remoting

import "testing"

// A signed request carries AccessKey and the HMAC-SHA1 (base64) of its field values in key
// order, AccessKey included, followed by its body; the caller's fields are left as they were.
func TestCredentialsSign(t *testing.T) {
	ext := map[string]string{"b": "2", "a": "1"}
	got := Credentials{AccessKey: "AK", SecretKey: "SK"}.sign(ext, []byte("xyz"))
	// HMAC-SHA1("SK", "AK" + "1" + "2" + "xyz"), computed independently.
	if got["Signature"] != "DKk6KO8gmzwyE+LH09qTz9brWHg=" || got["AccessKey"] != "AK" || got["a"] != "1" {
		t.Fatalf("signed fields %v", got)
	}
	if len(ext) != 2 {
		t.Fatalf("the caller's fields changed: %v", ext)
	}
	if out := (Credentials{}).sign(ext, nil); len(out) != 2 {
		t.Fatalf("empty credentials signed: %v", out)
	}
}
