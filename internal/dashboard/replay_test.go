// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// withReplay gives b's dashboard a publisher to an in-process broker, as the relay's.
func withReplay(t *testing.T, b *bundle) *rmqtest.Server {
	t.Helper()
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	pub, err := rocketmq.NewPublisher(rocketmq.Config{NameServers: []string{broker.NameServerAddr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	b.d.cfg.Replay = &ReplayConfig{Publisher: pub, Rate: 1000}
	t.Cleanup(b.d.Stop)
	return broker
}

// TestReplayFromTheDashboard: behind the admin token and its same-origin JSON rules, a
// replay by filter or of one message answers the dry run's count (409) until that count is
// confirmed, then sends exactly the selected sent rows in the background; the run list says
// what it sent, the message's timeline shows each replay that chose it, and no row changes.
func TestReplayFromTheDashboard(t *testing.T) {
	t.Parallel()
	ro := setup(t, "")
	withReplay(t, ro)
	b := setup(t, adminToken)
	broker := withReplay(t, b)
	b.seed(t, table, 5, 2, 60, "orders", "", `{"n":1}`)
	b.seed(t, table, 2, 0, 0, "orders", "", `{"n":2}`)
	b.seed(t, table, 3, 2, 60, "stock", "", `{"n":3}`)
	good := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json", "Origin": b.srv.URL}
	post := func(x *bundle, hdr map[string]string, body string) (int, string) {
		return x.do(t, "POST", "/ui/api/replay", hdr, body, nil)
	}
	byTopic := `{"table":"` + table + `","filter":{"topic":"orders"}`
	if code, raw := post(ro, good, byTopic+`,"confirm":5}`); code != 403 {
		t.Fatalf("read-only dashboard: %d %s", code, raw)
	}
	for _, h := range []map[string]string{
		{"Content-Type": "application/json"},
		{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json", "Origin": "http://evil.example"},
	} {
		if code, raw := post(b, h, byTopic+`,"confirm":5}`); code != 401 && code != 403 {
			t.Fatalf("without the token or cross-site: %d %s", code, raw)
		}
	}
	for _, confirm := range []string{"}", `,"confirm":4}`} {
		code, raw := post(b, good, byTopic+confirm)
		var c ConfirmNeeded
		_ = json.Unmarshal([]byte(raw), &c)
		if code != 409 || c.Count != 5 {
			t.Fatalf("confirm %q: %d %s, want 409 with the dry run's count 5", confirm, code, raw)
		}
	}
	if broker.Count("orders") != 0 {
		t.Fatal("sent before the count was confirmed")
	}
	waitRun := func(n int) ReplayRun {
		var runs []ReplayRun
		testenv.Eventually(t, 30*time.Second, "the replay to end", func() bool {
			runs = nil
			b.do(t, "GET", "/ui/api/replay", good, "", &runs)
			return len(runs) == n && runs[0].State != "running"
		})
		return runs[0]
	}
	if code, raw := post(b, good, byTopic+`,"confirm":5}`); code != 202 {
		t.Fatalf("confirmed: %d %s", code, raw)
	}
	if r := waitRun(1); r.State != "done" || r.Sent != 5 || r.Counted != 5 || broker.Count("orders") != 5 || broker.Count("stock") != 0 {
		t.Fatalf("run %+v; broker holds %d orders, %d stock", r, broker.Count("orders"), broker.Count("stock"))
	}
	// One message, by its msg_id.
	var id int64
	var msgID string
	if err := b.db.QueryRow("SELECT id, msg_id FROM "+table+" WHERE status = 2 AND topic = 'orders' ORDER BY id LIMIT 1").Scan(&id, &msgID); err != nil {
		t.Fatal(err)
	}
	one := `{"table":"` + table + `","msg_ids":["` + msgID + `"]`
	if code, raw := post(b, good, one+"}"); code != 409 || !strings.Contains(raw, `"count":1`) {
		t.Fatalf("one message, unconfirmed: %d %s", code, raw)
	}
	if code, raw := post(b, good, one+`,"confirm":1}`); code != 202 {
		t.Fatalf("one message: %d %s", code, raw)
	}
	if r := waitRun(2); r.State != "done" || r.Sent != 1 || broker.Count("orders") != 6 {
		t.Fatalf("run %+v; broker holds %d", r, broker.Count("orders"))
	}
	for _, m := range broker.Messages("orders") {
		if m.Properties[outbox.ReplayProperty] == "" {
			t.Fatalf("a copy without its mark: %v", m.Properties)
		}
	}
	var row RowAnswer
	b.do(t, "GET", fmt.Sprintf("/ui/api/row?table=%s&id=%d", table, id), good, "", &row)
	replays := 0
	for _, e := range row.Timeline {
		if e.Step == "replayed" {
			replays++
		}
	}
	if replays != 2 {
		t.Errorf("the timeline shows %d replays, want 2: %+v", replays, row.Timeline)
	}
	var unsent, sent int
	b.db.QueryRow("SELECT SUM(status = 0), SUM(status = 2) FROM "+table).Scan(&unsent, &sent)
	if unsent != 2 || sent != 8 {
		t.Errorf("rows changed: %d pending, %d sent; want 2 and 8", unsent, sent)
	}
	for body, want := range map[string]int{
		`{"table":"` + table + `","filter":{"since":200,"until":100}}`:    400,
		`{"table":"` + table + `","filter":{"key":"a b"}}`:                400,
		`{"table":"` + table + `","msg_ids":["a"],"filter":{}}`:           400,
		`{"table":"` + table + `"}`:                                       400,
		`{"table":"` + table + `","filter":{"topic":"none"},"confirm":0}`: 409,
	} {
		if code, raw := post(b, good, body); code != want {
			t.Errorf("%s: %d %s, want %d", body, code, raw, want)
		}
	}
}
