// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// metricsPage serves /metrics from one rendering shared by the requests that arrived before
// it began: a burst of scrapes, however many, costs one or two renderings (and gzip
// compressions) at a time, not one each. A scrape never gets a page rendered before it
// arrived.
type metricsPage struct {
	gatherer prometheus.Gatherer
	now      func() time.Time

	mu      sync.Mutex // held while rendering: one rendering at a time
	began   time.Time  // when the rendering of text began
	text    []byte
	gzipped []byte // text compressed, made on the first request that asks for it
	err     error
}

func newMetricsPage(g prometheus.Gatherer) *metricsPage {
	return &metricsPage{gatherer: g, now: time.Now}
}

// ServeHTTP answers with the text exposition format, gzipped when the client accepts it.
func (m *metricsPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := m.now()
	wantGzip := strings.Contains(r.Header.Get("Accept-Encoding"), "gzip")
	body, gz, err := m.page(arrived, wantGzip)
	if err != nil {
		http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	h.Set("Vary", "Accept-Encoding")
	if gz {
		h.Set("Content-Encoding", "gzip")
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// page returns a rendering begun at or after arrived, rendering it when there is none, and
// whether it is the gzipped form.
func (m *metricsPage) page(arrived time.Time, wantGzip bool) ([]byte, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.text == nil || m.began.Before(arrived) {
		m.began = m.now()
		m.text, m.gzipped, m.err = m.render()
	}
	if m.err != nil || !wantGzip {
		return m.text, false, m.err
	}
	if m.gzipped == nil {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(m.text)
		_ = zw.Close()
		m.gzipped = buf.Bytes()
	}
	return m.gzipped, true, nil
}

// render gathers the metrics and encodes them in the text format.
func (m *metricsPage) render() ([]byte, []byte, error) {
	mfs, err := m.gatherer.Gather()
	if err != nil {
		return nil, nil, err
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, nil, err
		}
	}
	return buf.Bytes(), nil, nil
}
