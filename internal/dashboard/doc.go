// SPDX-License-Identifier: Apache-2.0

// Package dashboard is the operator's web page served by `outbox-relay run` under /ui/ on
// http.addr: per table, the counts by status, the backlog and the age of the oldest due row,
// the sent/failed/dead activity of the last hour and the leader lock's state; the dead
// messages with filters, their bodies, and requeue of one, a selection or a filter.
//
// The page is plain HTML, CSS and one small script embedded in the binary (no build step, no
// CDN); it renders data only through text nodes, under a strict Content-Security-Policy. Its
// JSON API (api.go) calls the same internal/ops operations as the CLI. Reading needs nothing;
// requeue needs http.admin_token as a bearer token and a same-origin request (auth.go).
// The table's activity is a ring of samples kept in memory (activity.go), filled from the
// (status, next_retry_time) index at start and then one window at a time; the chart is drawn
// from the relay's own per-minute counters (Source.Activity, /ui/api/counters). The broker
// panel (brokers.go) shows what the relay knows of the name servers and brokers; the message
// explorer (explore.go, timeline.go) finds rows of any status and tells a row's story.
package dashboard
