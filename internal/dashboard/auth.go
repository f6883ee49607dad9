// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"crypto/sha256"
	"crypto/subtle"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// authorize lets a state change through only when an admin token is configured, the request
// is a POST from the dashboard's own origin (or from a non-browser client) with a JSON body,
// and it carries the token as "Authorization: Bearer <token>". A cross-site page cannot
// meet these: browsers send no Authorization header of their own, a form cannot post JSON,
// and they mark cross-site requests with Sec-Fetch-Site and Origin. It writes the refusal
// and returns false otherwise.
func (d *Dashboard) authorize(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "a change takes a POST")
	case d.cfg.AdminToken == "":
		writeError(w, http.StatusForbidden, "read-only dashboard: set http.admin_token to allow requeue and replay")
	case crossSite(r):
		writeError(w, http.StatusForbidden, "cross-site request refused")
	case !d.tokenOK(r.Header.Get("Authorization")):
		w.Header().Set("WWW-Authenticate", `Bearer realm="outbox-relay"`)
		writeError(w, http.StatusUnauthorized, "admin token required: enter http.admin_token at the top of the page")
	case !isJSON(r.Header.Get("Content-Type")):
		writeError(w, http.StatusUnsupportedMediaType, "the body must be application/json")
	default:
		return true
	}
	return false
}

// canRead lets a request read message bodies: with OpenReads, or with the read or the admin
// token. It writes the refusal and returns false otherwise.
func (d *Dashboard) canRead(w http.ResponseWriter, r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	switch {
	case d.cfg.OpenReads:
	case d.cfg.ReadToken == "" && d.cfg.AdminToken == "":
		writeError(w, http.StatusForbidden, "message bodies are not served on this address: set http.read_token, or listen on loopback (http.addr)")
		return false
	case !(d.cfg.ReadToken != "" && tokenEqual(auth, d.cfg.ReadToken)) && !(d.cfg.AdminToken != "" && tokenEqual(auth, d.cfg.AdminToken)):
		w.Header().Set("WWW-Authenticate", `Bearer realm="outbox-relay"`)
		writeError(w, http.StatusUnauthorized, "read token required: enter http.read_token (or http.admin_token) at the top of the page")
		return false
	}
	return true
}

// readLocked reports whether reading bodies needs a token (the page then asks for one).
func (d *Dashboard) readLocked() bool { return !d.cfg.OpenReads }

// hostOK accepts a Host header that is localhost, an IP address or one of Config.Hosts. A
// DNS-rebinding page reaches the server under its own, foreign name, which is refused.
func (d *Dashboard) hostOK(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if host == "" {
		return false
	}
	if strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil {
		return true
	}
	for _, h := range d.cfg.Hosts {
		if strings.EqualFold(host, strings.TrimSuffix(h, ".")) {
			return true
		}
	}
	return false
}

// crossSite reports a browser request from another origin than the one it is sent to.
func crossSite(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return true
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return true
		}
	}
	return false
}

// tokenOK reports whether header carries the admin token.
func (d *Dashboard) tokenOK(header string) bool { return tokenEqual(header, d.cfg.AdminToken) }

// tokenEqual compares header's bearer token with token in constant time (hashes of equal
// length, whatever the input's length).
func tokenEqual(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	if !ok || got == "" {
		return false
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}
