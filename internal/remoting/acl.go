// SPDX-License-Identifier: Apache-2.0

package remoting

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"maps"
	"slices"
	"strings"
)

// Credentials sign requests for a broker with ACL (1.0 or 2.0): the AccessKey field and an
// HMAC-SHA1 Signature, keyed by SecretKey, of the request's field values in key order and
// its body, as RocketMQ's clients sign.
type Credentials struct {
	AccessKey, SecretKey string
}

// WithCredentials signs every request of a connection with c; empty credentials sign nothing.
func WithCredentials(c Credentials) Option { return func(o *options) { o.creds = c } }

// sign returns ext with the AccessKey and Signature fields of c added (a copy; ext is not
// changed). Without an access key it returns ext.
func (c Credentials) sign(ext map[string]string, body []byte) map[string]string {
	if c.AccessKey == "" {
		return ext
	}
	out := maps.Clone(ext)
	if out == nil {
		out = map[string]string{}
	}
	delete(out, "Signature")
	out["AccessKey"] = c.AccessKey
	var content strings.Builder
	for _, k := range slices.Sorted(maps.Keys(out)) {
		content.WriteString(out[k])
	}
	mac := hmac.New(sha1.New, []byte(c.SecretKey))
	mac.Write([]byte(content.String()))
	mac.Write(body)
	out["Signature"] = base64.StdEncoding.EncodeToString(mac.Sum(nil))
	return out
}
