// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// GetAs sends GET url with the Host header host (empty: the URL's) and the bearer token
// (empty: none), and returns the status and body; a request that gets no answer within 10
// seconds fails the test.
func GetAs(tb testing.TB, url, host, token string) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
