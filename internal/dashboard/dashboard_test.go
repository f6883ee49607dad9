// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

const (
	table      = "local_message"
	otherTable = "payments_outbox"
	adminToken = "test-Admin-Token-0123456789"
)

// bundle is one test's dashboard on its own database and Redis prefix, served over HTTP.
type bundle struct {
	ctx    context.Context
	db     *testenv.DB
	rdb    *redis.Client
	prefix string
	d      *Dashboard
	srv    *httptest.Server
}

func setup(t *testing.T, token string) *bundle {
	t.Helper()
	b := &bundle{ctx: context.Background(), db: testenv.MySQL(t)}
	b.rdb, b.prefix = testenv.Redis(t)
	for _, tb := range []string{table, otherTable} {
		if err := schema.Migrate(b.ctx, b.db.DB, tb); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(b.rdb, Config{AdminToken: token, OpenReads: true, Databases: []Source{{Name: "default", Label: "db-server/" + b.db.Name,
		DB: b.db.DB, Tables: []string{table, otherTable}, LockKey: func(t string) string { return b.prefix + "lock:" + t }}}})
	if err != nil {
		t.Fatal(err)
	}
	b.d = d
	mux := http.NewServeMux()
	mux.Handle("/ui/", d)
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	return b
}

// seed inserts n rows of status st in table tb; ageSec sets their update_time in the past,
// and, for sent and dead rows, their next_retry_time, as the relay writes it when it settles
// a row; unsent rows are due in an hour.
func (b *bundle) seed(t *testing.T, tb string, n, st, ageSec int, topic, reason, body string) {
	t.Helper()
	for i := 0; i < n; i++ {
		_, err := b.db.Exec("INSERT INTO `"+tb+"` (msg_id, topic, content, status, fail_reason, next_retry_time, update_time)"+
			" VALUES (?, ?, ?, ?, NULLIF(?, ''), IF(? IN (2, 3), (UNIX_TIMESTAMP(NOW()) - ?) * 1000, ?), NOW() - INTERVAL ? SECOND)",
			fmt.Sprintf("%s-%d-%d-%s", topic, st, i, testenv.RandomSuffix(6)), topic, body, st, reason,
			st, ageSec, time.Now().Add(time.Hour).UnixMilli(), ageSec)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// do sends a request and decodes a JSON answer into out (when not nil).
func (b *bundle) do(t *testing.T, method, path string, hdr map[string]string, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, string(raw)
}

func (b *bundle) statusOf(t *testing.T, tb, where string) (st int) {
	t.Helper()
	if err := b.db.QueryRow("SELECT status FROM `" + tb + "` WHERE " + where).Scan(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestOverview(t *testing.T) {
	t.Parallel()
	b := setup(t, adminToken)
	b.seed(t, table, 3, 0, 0, "orders", "", "x")
	b.seed(t, table, 2, 1, 100, "orders", "timeout", "x")
	b.seed(t, table, 7, 2, 30, "orders", "", "x")
	b.seed(t, table, 1, 3, 30, "orders", "no route", "x")
	b.seed(t, otherTable, 4, 2, 30, "pay", "", "x")
	if _, err := b.db.Exec("UPDATE `" + table + "` SET next_retry_time = 0 WHERE status = 0"); err != nil {
		t.Fatal(err)
	}
	// The lock of table is held by another relay for 65 s; its token must never be shown.
	since := time.Now().Add(-65 * time.Second).UnixMilli()
	lockVal := fmt.Sprintf("host=relay-a pid=42 since=%d token=0123456789abcdef-lock-token", since)
	if err := b.rdb.Set(b.ctx, b.prefix+"lock:"+table, lockVal, 8*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.d.sources[0].activity.sample(b.ctx); err != nil {
		t.Fatal(err)
	}

	var o Overview
	code, raw := b.do(t, "GET", "/ui/api/overview", nil, "", &o)
	if code != 200 {
		t.Fatalf("overview: %d %s", code, raw)
	}
	if len(o.Tables) != 2 || o.Tables[0].Table != table || o.Tables[1].Table != otherTable || !o.Admin {
		t.Fatalf("overview = %s", raw)
	}
	st := o.Tables[0].Status
	if st.Pending != 3 || st.Failed != 2 || st.Sent != 7 || st.Dead != 1 || st.Due != 3 {
		t.Errorf("counts of %s = %+v", table, st)
	}
	if o.Tables[1].Status.Sent != 4 || o.Database != "db-server/"+b.db.Name {
		t.Errorf("other table / database: %+v, %q", o.Tables[1].Status, o.Database)
	}
	l := o.Tables[0].Lock
	if !l.Held || l.Host != "relay-a" || l.PID != 42 || l.ThisRelay || l.HeldForSeconds < 65 || l.TTLMillis <= 0 || l.TTLMillis > 8000 {
		t.Errorf("lock = %+v", l)
	}
	if l2 := o.Tables[1].Lock; l2.Held || l2.Key != b.prefix+"lock:"+otherTable {
		t.Errorf("free lock = %+v", l2)
	}
	a := o.Tables[0].Activity
	if a.Sent != 7 || a.Failed != 2 || a.Dead != 1 || a.BucketSeconds != 15 || len(a.Buckets) != 240 {
		t.Errorf("activity = sent %d failed %d dead %d, %d buckets of %ds", a.Sent, a.Failed, a.Dead, len(a.Buckets), a.BucketSeconds)
	}
	for _, secret := range []string{"lock-token", adminToken, "outbox:outbox@"} {
		if strings.Contains(raw, secret) {
			t.Errorf("overview shows a secret (%q): %s", secret, raw)
		}
	}

	// A lock held by this very process is marked as this relay's.
	own := fmt.Sprintf("host=%s pid=%d since=%d token=t", hostname(), os.Getpid(), since)
	b.rdb.Set(b.ctx, b.prefix+"lock:"+otherTable, own, 8*time.Second)
	if l := readLock(b.ctx, b.rdb, b.prefix+"lock:"+otherTable, time.Now()); !l.ThisRelay || !l.Held {
		t.Errorf("own lock = %+v", l)
	}
	// A value from an older relay (a bare random token) still shows as held, holder unknown.
	b.rdb.Set(b.ctx, b.prefix+"lock:"+otherTable, "c2VjcmV0LXRva2Vu", 8*time.Second)
	if l := readLock(b.ctx, b.rdb, b.prefix+"lock:"+otherTable, time.Now()); !l.Held || l.Host != "" || l.Since != nil {
		t.Errorf("opaque lock = %+v", l)
	}
}

func TestDeadListAndMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	hostile := `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`
	b.seed(t, table, 3, 3, 60, "orders", "broker: topic not exist", hostile)
	b.seed(t, table, 2, 3, 7200, "stock", "body too large", "{}")
	b.seed(t, table, 2, 2, 60, "orders", "", "{}")

	var page DeadPage
	if code, raw := b.do(t, "GET", "/ui/api/dead?table="+table+"&limit=2", nil, "", &page); code != 200 {
		t.Fatalf("dead: %d %s", code, raw)
	}
	if page.Count != 5 || len(page.Messages) != 2 || page.NextAfterID != page.Messages[1].ID {
		t.Fatalf("first page = %+v", page)
	}
	var next DeadPage
	b.do(t, "GET", fmt.Sprintf("/ui/api/dead?table=%s&limit=2&after_id=%d", table, page.NextAfterID), nil, "", &next)
	if len(next.Messages) != 2 || next.Messages[0].ID <= page.NextAfterID {
		t.Fatalf("second page = %+v", next)
	}
	hourAgo := time.Now().Add(-time.Hour).Unix()
	for q, want := range map[string]int64{
		"&topic=stock": 2, "&topic=ord*": 3, "&reason=TOO+LARGE": 2, "&reason=nothing": 0,
		fmt.Sprintf("&after=%d", hourAgo): 3, fmt.Sprintf("&before=%d", hourAgo): 2,
		fmt.Sprintf("&topic=orders&after=%d", hourAgo): 3,
	} {
		var p DeadPage
		if code, raw := b.do(t, "GET", "/ui/api/dead?table="+table+q, nil, "", &p); code != 200 || p.Count != want || len(p.Messages) != int(want) {
			t.Errorf("filter %s: %d %s, want %d rows", q, code, raw, want)
		}
	}

	// The body comes back verbatim: a JSON string, < and > escaped by the encoder.
	var m struct {
		MsgID   string `json:"msg_id"`
		Content string `json:"content"`
	}
	code, raw := b.do(t, "GET", fmt.Sprintf("/ui/api/message?table=%s&id=%d", table, page.Messages[0].ID), nil, "", &m)
	if code != 200 || m.Content != hostile || strings.Contains(raw, "<script>") {
		t.Fatalf("message: %d %s", code, raw)
	}

	var sentID int64
	_ = b.db.QueryRow("SELECT id FROM " + table + " WHERE status = 2 LIMIT 1").Scan(&sentID)
	for path, want := range map[string]int{
		fmt.Sprintf("/ui/api/message?table=%s&id=%d", table, sentID): 404, // not dead
		"/ui/api/dead?table=nope":                                    404,
		"/ui/api/dead?table=" + table + "&after=yesterday":           400,
		"/ui/api/dead?table=" + table + "&limit=100000":              400,
		"/ui/api/message?table=" + table + "&id=x":                   400,
	} {
		if code, raw := b.do(t, "GET", path, nil, "", nil); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, raw, want)
		}
	}
}

// State changes need the configured token, a POST, a JSON body and a same-origin request;
// every refusal leaves the row dead.
func TestRequeueRefusals(t *testing.T) {
	t.Parallel()
	ro := setup(t, "")
	b := setup(t, adminToken)
	for _, x := range []*bundle{ro, b} {
		x.seed(t, table, 1, 3, 60, "orders", "boom", "x")
	}
	body := `{"table":"` + table + `","filter":{},"confirm":1}`
	good := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
	with := func(k, v string) map[string]string {
		h := map[string]string{}
		for hk, hv := range good {
			h[hk] = hv
		}
		if v == "" {
			delete(h, k)
		} else {
			h[k] = v
		}
		return h
	}
	cases := []struct {
		name   string
		b      *bundle
		method string
		hdr    map[string]string
		want   int
	}{
		{"read-only dashboard", ro, "POST", good, 403},
		{"GET", b, "GET", good, 405},
		{"no token", b, "POST", with("Authorization", ""), 401},
		{"wrong token", b, "POST", with("Authorization", "Bearer "+adminToken+"x"), 401},
		{"token not as a bearer", b, "POST", with("Authorization", adminToken), 401},
		{"cross-site fetch", b, "POST", with("Sec-Fetch-Site", "cross-site"), 403},
		{"same-site subdomain", b, "POST", with("Sec-Fetch-Site", "same-site"), 403},
		{"foreign origin", b, "POST", with("Origin", "http://evil.example"), 403},
		{"form post", b, "POST", with("Content-Type", "application/x-www-form-urlencoded"), 415},
	}
	for _, c := range cases {
		code, raw := c.b.do(t, c.method, "/ui/api/requeue", c.hdr, body, nil)
		if code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, raw, c.want)
		}
		if strings.Contains(raw, adminToken) {
			t.Errorf("%s: the answer shows the token: %s", c.name, raw)
		}
		if st := c.b.statusOf(t, table, "1"); st != 3 {
			t.Fatalf("%s: the row changed to status %d", c.name, st)
		}
	}
	// The page's own request: same origin, token, JSON.
	var res struct{ Requeued []string }
	code, raw := b.do(t, "POST", "/ui/api/requeue", with("Origin", b.srv.URL), body, &res)
	if code != 200 || len(res.Requeued) != 1 || b.statusOf(t, table, "1") != 0 {
		t.Fatalf("authorized requeue: %d %s", code, raw)
	}
}

// A requeue by filter runs only when it names the number of rows the filter matches now.
func TestRequeueByFilterNeedsTheCount(t *testing.T) {
	t.Parallel()
	b := setup(t, adminToken)
	b.seed(t, table, 3, 3, 60, "orders", "broker busy", "x")
	b.seed(t, table, 2, 3, 60, "orders", "no route", "x")
	hdr := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
	req := func(confirm string) (int, string) {
		return b.do(t, "POST", "/ui/api/requeue", hdr, `{"table":"`+table+`","filter":{"reason":"busy"}`+confirm+`}`, nil)
	}
	for _, confirm := range []string{"", `,"confirm":2`, `,"confirm":5`} {
		code, raw := req(confirm)
		var c ConfirmNeeded
		_ = json.Unmarshal([]byte(raw), &c)
		if code != 409 || c.Count != 3 {
			t.Fatalf("confirm %q: %d %s, want 409 with count 3", confirm, code, raw)
		}
	}
	if code, raw := req(`,"confirm":3`); code != 200 || !strings.Contains(raw, `"requeued":[`) {
		t.Fatalf("confirmed: %d %s", code, raw)
	}
	var dead, pending int
	b.db.QueryRow("SELECT SUM(status = 3), SUM(status = 0) FROM "+table).Scan(&dead, &pending)
	if dead != 2 || pending != 3 {
		t.Fatalf("after requeue: %d dead, %d pending; want 2 and 3", dead, pending)
	}
	// Selections: by msg_ids, at most maxSelected; not both kinds at once; a known table.
	for body, want := range map[string]int{
		`{"table":"` + table + `","msg_ids":["a"],"filter":{}}`:                                400,
		`{"table":"` + table + `"}`:                                                            400,
		`{"table":"nope","msg_ids":["a"]}`:                                                     404,
		`{"table":"` + table + `","msg_ids":["a"],"extra":1}`:                                  400,
		`{"table":"` + table + `","msg_ids":["` + strings.Repeat(`a","`, maxSelected) + `a"]}`: 400,
	} {
		if code, raw := b.do(t, "POST", "/ui/api/requeue", hdr, body, nil); code != want {
			t.Errorf("%.60s: %d %s, want %d", body, code, raw, want)
		}
	}
}

// The page is served from the binary under a strict policy, and its script never turns data
// into markup.
func TestPageIsEmbeddedAndLockedDown(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	resp, err := http.Get(b.srv.URL + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(string(page), `<script src="app.js" defer>`) {
		t.Fatalf("/ui/: %d %.200s", resp.StatusCode, page)
	}
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("headers: %v", resp.Header)
	}
	for _, f := range []string{"index.html", "app.js", "style.css"} {
		src, err := webFiles.ReadFile("web/" + f)
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "http://", "https://"} {
			if strings.Contains(string(src), bad) && !(bad == "http://" && strings.Contains(string(src), "http://www.w3.org/2000/svg")) {
				t.Errorf("web/%s uses %s", f, bad)
			}
		}
	}
	if code, _ := b.do(t, "GET", "/ui/app.js", nil, "", nil); code != 200 {
		t.Errorf("app.js: %d", code)
	}
}

// The ring is filled from the last hour at the first sample, then grows one bucket at a time
// and keeps only the window.
func TestActivityRing(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.seed(t, table, 5, 2, 600, "orders", "", "x")  // 10 minutes ago
	b.seed(t, table, 1, 3, 5000, "orders", "", "x") // before the window
	r := newActivityRing(b.db.DB, []string{table}, 2*time.Second, 20*time.Minute, b.d.log)
	if err := r.sample(b.ctx); err != nil {
		t.Fatal(err)
	}
	v := r.view(table)
	if v.Sent != 5 || v.Dead != 0 || len(v.Buckets) != 600 {
		t.Fatalf("filled ring: sent %d dead %d, %d buckets", v.Sent, v.Dead, len(v.Buckets))
	}
	// Rows that die now are counted once their bucket is complete (commitLag behind the clock).
	b.seed(t, table, 2, 3, 0, "orders", "boom", "x")
	testenv.Eventually(t, 10*time.Second, "the new dead rows in the ring", func() bool {
		if err := r.sample(b.ctx); err != nil {
			t.Fatal(err)
		}
		return r.view(table).Dead == 2
	})
	v = r.view(table)
	if v.Sent != 5 || len(v.Buckets) != 600 {
		t.Fatalf("ring after samples: sent %d, %d buckets", v.Sent, len(v.Buckets))
	}
	for i := 1; i < len(v.Buckets); i++ {
		if v.Buckets[i].Start != v.Buckets[i-1].Start+2 {
			t.Fatalf("buckets not contiguous at %d: %d after %d", i, v.Buckets[i].Start, v.Buckets[i-1].Start)
		}
	}
}

func TestStartStop(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	b.d.Stop() // before Start: nothing to do
	if err := b.d.Start(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.d.Start(b.ctx); err == nil {
		t.Fatal("second Start accepted")
	}
	testenv.Eventually(t, 10*time.Second, "the first activity sample", func() bool {
		return len(b.d.sources[0].activity.view(table).Buckets) > 0
	})
	b.d.Stop()
	b.d.Stop()
	src := Source{Name: "a", DB: b.db.DB, Tables: []string{table}, LockKey: func(string) string { return "" }}
	bad := src
	bad.Tables = []string{"bad name"}
	for what, cfg := range map[string]Config{
		"bad table":     {Databases: []Source{bad}},
		"no database":   {},
		"repeated name": {Databases: []Source{src, src}},
		"no lock key":   {Databases: []Source{{Name: "a", DB: b.db.DB, Tables: []string{table}}}},
		"no tables":     {Databases: []Source{{Name: "a", DB: b.db.DB, LockKey: src.LockKey}}},
	} {
		if _, err := New(b.rdb, cfg); err == nil {
			t.Errorf("%s accepted", what)
		}
	}
}

// With relay.partitions > 1 the overview shows each partition's lock and who holds it.
func TestOverviewOfAPartitionedTable(t *testing.T) {
	t.Parallel()
	b := &bundle{ctx: context.Background(), db: testenv.MySQL(t)}
	b.rdb, b.prefix = testenv.Redis(t)
	if err := schema.MigratePartitioned(b.ctx, b.db.DB, table, 4); err != nil {
		t.Fatal(err)
	}
	lockKey := func(t string) string { return b.prefix + "lock:" + t }
	d, err := New(b.rdb, Config{OpenReads: true, Databases: []Source{{Name: "default", DB: b.db.DB, Tables: []string{table}, LockKey: lockKey, Partitions: 4}}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", d)
	b.srv = httptest.NewServer(mux)
	t.Cleanup(b.srv.Close)
	since := time.Now().UnixMilli()
	for p, host := range map[int]string{0: "relay-a", 1: "relay-b", 3: "relay-a"} {
		v := fmt.Sprintf("host=%s pid=7 since=%d token=t%d", host, since, p)
		if err := b.rdb.Set(b.ctx, relay.PartitionLockKey(lockKey(table), p, 4), v, 8*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var o Overview
	if code, raw := b.do(t, "GET", "/ui/api/overview", nil, "", &o); code != 200 || len(o.Tables) != 1 {
		t.Fatalf("overview: %d %s", code, raw)
	}
	ps := o.Tables[0].Partitions
	if len(ps) != 4 {
		t.Fatalf("%d partition locks, want 4", len(ps))
	}
	for p, want := range []string{"relay-a", "relay-b", "", "relay-a"} {
		if ps[p].Held != (want != "") || ps[p].Host != want {
			t.Errorf("partition %d: held %v by %q, want %q", p, ps[p].Held, ps[p].Host, want)
		}
	}
}
