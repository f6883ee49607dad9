// SPDX-License-Identifier: Apache-2.0

package main

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// scrape GETs /metrics from h and returns the page, unzipped when it came gzipped.
func scrape(t *testing.T, h http.Handler, gz bool) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	var body io.Reader = rec.Body
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMetricsPageIsNeverOlderThanTheScrape: the shared rendering never answers a scrape that
// arrived after it began: a counter increased between two scrapes shows its new value, in
// both the plain and the gzipped page.
func TestMetricsPageIsNeverOlderThanTheScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "outbox_relay_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	page := newMetricsPage(reg)
	for i, gz := range []bool{false, true, true, false} {
		c.Inc()
		want := "outbox_relay_test_total " + string(rune('1'+i))
		if got := scrape(t, page, gz); !strings.Contains(got, want) {
			t.Fatalf("scrape %d (gzip %v) does not show %q:\n%s", i, gz, want, got)
		}
	}
}
