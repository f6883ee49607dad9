// SPDX-License-Identifier: Apache-2.0

// Package httpserve runs the relay's HTTP server (metrics, probes, dashboard) hardened for a
// port that anyone on the network may reach: every phase of a request has a timeout, the
// number of open connections is bounded (idle and stalled ones make room for new ones),
// and request bodies are bounded. A slow or idle client holds one connection of a bounded
// set for a bounded time; it never blocks another client or /healthz.
package httpserve
