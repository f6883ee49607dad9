// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
)

// http.admin_token is a secret: loaded from the environment, masked in every output, and a
// bad one is refused naming the key without echoing it.
func TestAdminTokenIsSecret(t *testing.T) {
	const token = "adm1n-Token-0123456789"
	t.Setenv("OUTBOX_HTTP_ADMIN_TOKEN", token)
	c := mustLoad(t, "")
	if c.HTTP.AdminToken != token {
		t.Fatalf("http.admin_token = %q, want the environment's", c.HTTP.AdminToken)
	}
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"YAML": string(y), "%+v": sprintf("%+v", c), "%#v": sprintf("%#v", c), "String": c.String()} {
		if strings.Contains(out, token) {
			t.Errorf("%s leaks the admin token:\n%s", name, out)
		}
	}
	if !strings.Contains(string(y), "admin_token: '*****'") && !strings.Contains(string(y), `admin_token: "*****"`) {
		t.Errorf("YAML does not show the token as set (masked):\n%s", y)
	}

	t.Setenv("OUTBOX_HTTP_ADMIN_TOKEN", "short-Secret")
	_, err = load(t, "")
	if err == nil || !strings.Contains(err.Error(), KeyHTTPAdminToken) || strings.Contains(err.Error(), "short-Secret") {
		t.Errorf("short token: error = %v, want one naming %s without the token", err, KeyHTTPAdminToken)
	}
}

// http.read_token is a secret as well.
func TestReadTokenIsSecret(t *testing.T) {
	const token = "re4d-Token-0123456789"
	t.Setenv("OUTBOX_HTTP_READ_TOKEN", token)
	t.Setenv("OUTBOX_HTTP_HOSTS", "relay.internal,outbox.example.com")
	c := mustLoad(t, "")
	if c.HTTP.ReadToken != token || len(c.HTTP.Hosts) != 2 {
		t.Fatalf("http = %+v, want the environment's token and hosts", c.HTTP)
	}
	y, err := c.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"YAML": string(y), "%+v": sprintf("%+v", c), "%#v": sprintf("%#v", c), "String": c.String()} {
		if strings.Contains(out, token) {
			t.Errorf("%s leaks the read token:\n%s", name, out)
		}
	}
	t.Setenv("OUTBOX_HTTP_READ_TOKEN", "short-Secret")
	_, err = load(t, "")
	if err == nil || !strings.Contains(err.Error(), KeyHTTPReadToken) || strings.Contains(err.Error(), "short-Secret") {
		t.Errorf("short token: error = %v, want one naming %s without the token", err, KeyHTTPReadToken)
	}
}

// The example Secret's placeholder token is refused as a real one, whatever its case.
func TestPlaceholderTokensAreRefused(t *testing.T) {
	for env, key := range map[string]string{"OUTBOX_HTTP_ADMIN_TOKEN": KeyHTTPAdminToken, "OUTBOX_HTTP_READ_TOKEN": KeyHTTPReadToken} {
		for _, tok := range []string{"CHANGE-ME-at-least-16-characters", "my-change-me-token-0123"} {
			t.Setenv(env, tok)
			_, err := load(t, "")
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "placeholder") || strings.Contains(err.Error(), tok) {
				t.Errorf("%s=%s: error = %v, want one naming %s as a placeholder without the token", env, tok, err, key)
			}
		}
		t.Setenv(env, "")
	}
}
