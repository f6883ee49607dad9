// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"slices"
	"strings"
)

// ACL signatures, as a RocketMQ 4.x broker with aclEnable=true (or an ACL 2.0 broker
// reading 4.x clients) checks them: the client signs each request with HMAC-SHA1 of its
// secret key over the values of its header fields in the order of their names (AccessKey
// and SecurityToken included, Signature left out) followed by the body, base64-encoded in the
// Signature field beside AccessKey.

// Ext fields of a signed request.
const (
	extAccessKey = "AccessKey"
	extSignature = "Signature"
)

// signatureOK reports whether req is signed with the secret key of its access key in
// credentials (access key to secret key).
func signatureOK(credentials map[string]string, req *command) bool {
	secret, known := credentials[req.Ext[extAccessKey]]
	if !known || req.Ext[extSignature] == "" {
		return false
	}
	want, err := base64.StdEncoding.DecodeString(req.Ext[extSignature])
	if err != nil {
		return false
	}
	return hmac.Equal(sign(secret, req.Ext, req.Body), want)
}

// sign is the HMAC-SHA1 with secret of ext's values but the signature, in the order of their
// names, followed by body.
func sign(secret string, ext map[string]string, body []byte) []byte {
	names := make([]string, 0, len(ext))
	for k := range ext {
		if k != extSignature {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var content strings.Builder
	for _, k := range names {
		content.WriteString(ext[k])
	}
	mac := hmac.New(sha1.New, []byte(secret))
	mac.Write([]byte(content.String()))
	mac.Write(body)
	return mac.Sum(nil)
}

// aclRefused answers req NO_PERMISSION when the server checks signatures and req's is
// missing or wrong, and reports whether it did.
func (s *Server) aclRefused(c *conn, req *command) bool {
	if len(s.opts.Credentials) == 0 || signatureOK(s.opts.Credentials, req) {
		return false
	}
	s.aclRefusals.Add(1)
	c.reply(req, newResponse(req, resNoPermission, "rmqtest: request not signed with known credentials (AccessKey "+req.Ext[extAccessKey]+")"))
	return true
}

// ACLRefusals returns the number of broker requests refused for a missing or wrong signature
// (Options.Credentials).
func (s *Server) ACLRefusals() int64 { return s.aclRefusals.Load() }
