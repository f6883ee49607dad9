// SPDX-License-Identifier: Apache-2.0

package outbox

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// SignatureProperty carries a half message's signature (SignHalf): the relay's check
// responder acts on a row only for a half that carries a valid one. A reserved name.
const SignatureProperty = "OUTBOX_SIG"

// halfSigDomain separates this MAC from any other use of the same secret.
const halfSigDomain = "outbox-half-v1"

// SignHalf returns the signature of the half of row msgID of table, sent to topic: the hex
// HMAC-SHA256, under secret, of "outbox-half-v1", table, msgID and topic, each followed by
// a NUL byte. Writers of halves and the relays that answer their checks share the secret;
// docs/security.md shows the same computation in other languages.
func SignHalf(secret, table, msgID, topic string) string {
	m := hmac.New(sha256.New, []byte(secret))
	for _, s := range []string{halfSigDomain, table, msgID, topic} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// VerifyHalf reports whether sig is SignHalf's signature under one of secrets (several
// while a secret is being replaced). It compares in constant time.
func VerifyHalf(secrets []string, sig, table, msgID, topic string) bool {
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size {
		return false
	}
	ok := false
	for _, s := range secrets {
		want, _ := hex.DecodeString(SignHalf(s, table, msgID, topic))
		if hmac.Equal(got, want) {
			ok = true
		}
	}
	return ok
}
