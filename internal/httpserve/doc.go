// SPDX-License-Identifier: Apache-2.0

// Package httpserve runs the relay's HTTP server (metrics, probes, dashboard) hardened for a
// port that anyone on the network may reach: every phase of a request has a timeout, each
// write of an answer has a short one of its own (a client that stops reading is cut), the
// number of open connections is bounded (idle and stalled ones make room for new ones, and a
// few reserved connections beyond the bound serve the probes only), and request bodies are
// bounded. A slow or idle client holds one connection of a bounded set for a bounded time;
// it never blocks another client or /healthz.
package httpserve
