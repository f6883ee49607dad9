// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// seedOrder writes the rows of order SN-1001 in table: its event, sent after one deferred
// attempt, a handed row of another order and a dead one; payments get a row of their own.
func seedOrder(t *testing.T, b *bundle) {
	t.Helper()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := b.db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec("INSERT INTO `"+table+"` (msg_id, topic, tag, content, status, retry_count, fail_reason, msg_keys, sharding_key, create_time, sent_time, next_retry_time)"+
		" VALUES ('evt-1', 'orders', 'created', '{\"order\":\"SN-1001\"}', 2, 0, ?, 'SN-1001 cust-9', 'cust-9', NOW() - INTERVAL 600 SECOND,"+
		" (UNIX_TIMESTAMP(NOW()) - 500) * 1000, (UNIX_TIMESTAMP(NOW()) - 500) * 1000)", "send: connection refused "+deferredMark)
	exec("INSERT INTO `" + table + "` (msg_id, topic, content, status, msg_keys) VALUES ('evt-2', 'orders', 'x', 4, 'SN-10010')")
	exec("INSERT INTO `" + table + "` (msg_id, topic, content, status, retry_count, fail_reason, msg_keys) VALUES ('evt-3', 'orders', 'x', 3, 4, 'too large', 'SN-2002')")
	exec("INSERT INTO `" + otherTable + "` (msg_id, topic, content, status, msg_keys) VALUES ('pay-1', 'payments', 'p', 0, 'SN-1001')")
}

func window() string {
	now := time.Now().Unix()
	return fmt.Sprintf("&from=%d&to=%d", now-86400, now+60)
}

// TestExplorerFindsAnOrderInEveryStatus: the order number finds its rows in every table,
// whatever their status; a row's page tells its story from the table's columns and shows the
// body; handed rows are found by their status.
func TestExplorerFindsAnOrderInEveryStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	seedOrder(t, b)
	var ans SearchAnswer
	if code, raw := b.do(t, "GET", "/ui/api/search?key=SN-1001"+window(), nil, "", &ans); code != 200 {
		t.Fatalf("search: %d %s", code, raw)
	}
	got := map[string]string{}
	for _, m := range ans.Messages {
		got[m.Table+"/"+m.MsgID] = m.StatusName
	}
	if len(got) != 2 || got[table+"/evt-1"] != "sent" || got[otherTable+"/pay-1"] != "pending" || ans.Plan != "window" {
		t.Fatalf("by order number: %v (%+v)", got, ans)
	}
	var row RowAnswer
	path := fmt.Sprintf("/ui/api/row?table=%s&id=%d", table, ans.Messages[0].ID)
	if ans.Messages[0].Table != table {
		path = fmt.Sprintf("/ui/api/row?table=%s&id=%d", table, ans.Messages[1].ID)
	}
	if code, raw := b.do(t, "GET", path, nil, "", &row); code != 200 {
		t.Fatalf("row: %d %s", code, raw)
	}
	var steps []string
	for _, e := range row.Timeline {
		steps = append(steps, e.Step)
	}
	if strings.Join(steps, " ") != "written failed sent stored audit" || row.Content != `{"order":"SN-1001"}` || row.Timeline[2].At == nil {
		t.Fatalf("timeline %v, body %q: %+v", steps, row.Content, row.Timeline)
	}
	if !strings.Contains(row.Timeline[1].Detail, "no retry spent") {
		t.Fatalf("a deferred attempt is not told apart: %+v", row.Timeline[1])
	}
	if code, raw := b.do(t, "GET", "/ui/api/search?table="+table+"&status=4"+window(), nil, "", &ans); code != 200 || len(ans.Messages) != 1 || ans.Messages[0].MsgID != "evt-2" {
		t.Fatalf("handed rows: %d %s", code, raw)
	}
	if code, _ := b.do(t, "GET", "/ui/api/search?key=SN-1001", nil, "", nil); code != 400 {
		t.Fatalf("a key search without a window: %d, want 400", code)
	}
	if code, _ := b.do(t, "GET", "/ui/api/search?table=nope&msg_id=evt-1", nil, "", nil); code != 404 {
		t.Fatalf("an unknown table: %d, want 404", code)
	}
}

// TestExplorerKeepsTheReadPermission: off loopback, searching and reading a row need the
// read or admin token, exactly as the dead list does; a foreign Host is refused.
func TestExplorerKeepsTheReadPermission(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	seedOrder(t, b)
	const readToken = "read-token-0123456789"
	d, err := New(b.rdb, Config{ReadToken: readToken, AdminToken: adminToken, Databases: b.d.cfg.Databases})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	get := func(path, token, host string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/ui/api/search?msg_id=evt-1", "/ui/api/row?table=" + table + "&id=1"} {
		if c := get(path, "", ""); c != 401 {
			t.Errorf("%s without a token: %d, want 401", path, c)
		}
		if c := get(path, "wrong-token-0123456789", ""); c != 401 {
			t.Errorf("%s with a wrong token: %d, want 401", path, c)
		}
		if c := get(path, readToken, ""); c != 200 {
			t.Errorf("%s with the read token: %d, want 200", path, c)
		}
		if c := get(path, adminToken, ""); c != 200 {
			t.Errorf("%s with the admin token: %d, want 200", path, c)
		}
		if c := get(path, readToken, "attacker.example:80"); c != 421 {
			t.Errorf("%s under a foreign host: %d, want 421", path, c)
		}
	}
}

// TestBrokerPanelNamesTheAccessKeyNeverTheSecret: the panel is served as the relay reports
// it, with every configured secret taken out of its texts.
func TestBrokerPanelNamesTheAccessKeyNeverTheSecret(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	const secret = "the-Secret-Key-42"
	since := time.Now().Add(-4 * time.Minute)
	panel := BrokerPanel{
		NameServers: []rocketmq.BrokerState{{Addr: "127.0.0.1:9876", State: rocketmq.StateHealthy, Since: since}},
		Brokers:     []rocketmq.BrokerState{{Name: "broker-a", Addr: "127.0.0.1:10911", State: rocketmq.StateFailing, Circuit: "open", LastError: "dial: connection refused"}},
		Incidents:   []TableIncident{{Database: "default", Table: table, BrokerIncident: relay.BrokerIncident{Broker: "127.0.0.1:10911", Since: since, LastError: "refused"}}},
		Refusals: []TableRefusal{{Database: "default", Table: table, TopicRefusal: relay.TopicRefusal{Topic: "payments", Since: since,
			LastError: "NO_PERMISSION signature " + secret + " (access key relay-ak)"}}},
		AccessKey: "relay-ak",
	}
	calls := 0
	d, err := New(b.rdb, Config{Databases: b.d.cfg.Databases, Secrets: []string{secret, ""},
		Brokers: func(context.Context) BrokerPanel { calls++; return panel }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	var ans BrokersAnswer
	raw := getJSON(t, srv.URL+"/ui/api/brokers", &ans)
	if strings.Contains(raw, secret) || !strings.Contains(raw, `"access_key":"relay-ak"`) || !ans.Known ||
		ans.Brokers[0].State != "failing" || len(ans.Incidents) != 1 || !strings.Contains(ans.Refusals[0].LastError, "[redacted]") {
		t.Fatalf("panel: %s", raw)
	}
	getJSON(t, srv.URL+"/ui/api/brokers", &ans)
	if calls != 1 {
		t.Fatalf("the panel was computed %d times for two pages within CacheFor", calls)
	}
}

// TestCountersAreTheRelays: /ui/api/counters serves each table's minutes as the relay
// counted them, with their sums; a table the process does not relay has none.
func TestCountersAreTheRelays(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	src := b.d.cfg.Databases[0]
	src.Activity = func(tb string) []relay.MinuteActivity {
		if tb != table {
			return nil
		}
		return []relay.MinuteActivity{{Start: 60, Sent: 3, Failed: 7}, {Start: 120, Sent: 2, Dead: 1}}
	}
	d, err := New(b.rdb, Config{Databases: []Source{src}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	var got []CountersView
	getJSON(t, srv.URL+"/ui/api/counters", &got)
	if len(got) != 2 || got[0].Sent != 5 || got[0].Failed != 7 || got[0].Dead != 1 || len(got[1].Minutes) != 0 {
		t.Fatalf("counters: %+v", got)
	}
}

// TestExplorerScriptIsText: the explorer's script, like app.js, never turns data into markup
// and loads nothing from elsewhere.
func TestExplorerScriptIsText(t *testing.T) {
	src, err := webFiles.ReadFile("web/explorer.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "http://", "https://", ".style"} {
		if strings.Contains(string(src), bad) {
			t.Errorf("web/explorer.js uses %s", bad)
		}
	}
}

func getJSON(t *testing.T, u string, out any) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || json.Unmarshal(raw, out) != nil {
		t.Fatalf("GET %s: %d %s", u, resp.StatusCode, raw)
	}
	return string(raw)
}
