// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/schema"
)

// TestBrowserExplorer drives the broker panel and the message explorer of the real relay
// binary in headless Chromium (testdata/browser/explorer.mjs), in two acts. First, with the
// broker up: the panel shows it healthy, the chart counts what the relay sent, handed rows
// are counted, and the order number SN-1001 finds its event in every table, whose page shows
// its timeline and body. Then the broker is stopped and a topic's sends are refused as by an
// ACL: the panel shows the broker failing with its circuit open, the table's incident (rows
// wait, no retry spent), the refused topic with the access key and never the secret key, and
// the chart's failed attempts; the rows are delivered once the broker is back.
// OUTBOX_TEST_SCREENSHOTS=dir keeps the screenshots there.
func TestBrowserExplorer(t *testing.T) {
	node, chromium, db, prefix := browserSetup(t)
	ctx := context.Background()
	exec1 := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	// Order SN-1001's events: created (pending, sent by the relay), paid (deferred once by a
	// broker incident, no retry spent, then sent), and its payment in the other table; plus
	// handed rows.
	exec1("INSERT INTO `" + table + "` (msg_id, topic, tag, content, msg_keys, sharding_key, create_time) VALUES" +
		" ('order-created-1001', 'orders', 'created', '{\"order\":\"SN-1001\",\"event\":\"created\"}', 'SN-1001 customer-77', 'customer-77', NOW() - INTERVAL 900 SECOND)")
	exec1("INSERT INTO `"+table+"` (msg_id, topic, tag, content, msg_keys, sharding_key, status, retry_count, fail_reason, create_time, next_retry_time) VALUES"+
		" ('order-paid-1001', 'orders', 'paid', '{\"order\":\"SN-1001\",\"event\":\"paid\",\"note\":\"<img src=x onerror=window.__pwned=1>\"}', 'SN-1001 customer-77', 'customer-77', 1, 0, ?, NOW() - INTERVAL 300 SECOND, 0)",
		"send orders: dial tcp 10.0.0.12:10911: connection refused (broker 10.0.0.12:10911) (broker incident: attempt not counted)")
	exec1("INSERT INTO `" + otherTable + "` (msg_id, topic, content, msg_keys) VALUES ('payment-1001', 'payments', '{\"order\":\"SN-1001\"}', 'SN-1001')")
	for _, id := range []string{"tx-1", "tx-2", "tx-3"} {
		exec1("INSERT INTO `"+table+"` (msg_id, topic, content, status, msg_keys) VALUES (?, 'orders', '{}', 4, 'SN-3000')", id)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	const accessKey, secretKey = "relay-ak", "relay-Secret-Key-never-shown"
	relay := startRelayBinary(t, db, prefix, broker, "OUTBOX_ROCKETMQ_ACCESS_KEY="+accessKey, "OUTBOX_ROCKETMQ_SECRET_KEY="+secretKey,
		"OUTBOX_AUDIT_ENABLED=true") // the explorer shows where messages were stored and the audit panel
	testenv.Eventually(t, 30*time.Second, "the seeded events sent", func() bool {
		var n int
		_ = db.QueryRow("SELECT COUNT(*) FROM `" + table + "` WHERE status = 2").Scan(&n)
		return n == 2
	})
	shots := os.Getenv("OUTBOX_TEST_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	act := func(name string, seed map[string]any) {
		t.Helper()
		raw, _ := json.Marshal(seed)
		nctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(nctx, node, filepath.Join(browserDir, "explorer.mjs"))
		cmd.Env = append(os.Environ(), "BASE_URL="+relay.base, "ACT="+name, "SEED="+string(raw), "SHOTS="+shots, "CHROMIUM="+chromium)
		out, err := cmd.CombinedOutput()
		t.Logf("browser (%s):\n%s", name, out)
		if err != nil {
			t.Fatalf("the browser test failed (%s): %v", name, err)
		}
	}
	act("explore", map[string]any{"table": table, "other": otherTable, "order": "SN-1001", "handed": 3, "sent": 2})

	// The outage: the broker stops, a topic is refused as an ACL refuses it, rows keep coming.
	broker.SetTopicFaults("payments", rmqtest.Faults{ErrorRate: 1, ErrorCode: 16, ErrorRemark: "No permission for topic payments"})
	exec1("INSERT INTO `" + otherTable + "` (msg_id, topic, content, msg_keys) VALUES ('payment-1002', 'payments', '{}', 'SN-1002')")
	testenv.Eventually(t, 30*time.Second, "/readyz to report the refused topic", func() bool {
		return strings.Contains(readyz(t, relay), "topic payments refused for the relay's configuration")
	})
	broker.StopBroker()
	for _, id := range []string{"order-created-1002", "order-created-1003"} {
		exec1("INSERT INTO `"+table+"` (msg_id, topic, content, msg_keys) VALUES (?, 'orders', '{}', 'SN-1002')", id)
	}
	testenv.Eventually(t, 30*time.Second, "/readyz to report the broker failing", func() bool {
		return strings.Contains(readyz(t, relay), "failing for")
	})
	act("outage", map[string]any{"table": table, "broker": broker.BrokerAddr(), "access_key": accessKey, "secret": secretKey})

	if err := broker.StartBroker(); err != nil {
		t.Fatal(err)
	}
	broker.ClearFaults()
	testenv.Eventually(t, 60*time.Second, "every row sent once the broker is back", func() bool {
		var n int
		_ = db.QueryRow("SELECT (SELECT COUNT(*) FROM `" + table + "` WHERE status NOT IN (2, 4)) + (SELECT COUNT(*) FROM `" + otherTable + "` WHERE status <> 2)").Scan(&n)
		return n == 0
	})
	if strings.Contains(relay.out.String(), secretKey) {
		t.Fatal("the relay logged the secret key")
	}
}

// readyz returns the relay's /readyz text.
func readyz(t *testing.T, p *relayProcess) string {
	t.Helper()
	resp, err := http.Get(strings.TrimSuffix(p.base, "ui/") + "readyz")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// browserSetup skips under -short, finds the browser tools (browserTools) and gives the test
// a database with both tables and a Redis prefix of its own.
func browserSetup(t *testing.T) (node, chromium string, db *testenv.DB, prefix string) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the browser test builds and runs the relay")
	}
	node, chromium = browserTools(t)
	rlog.SetLogLevel("error")
	db = testenv.MySQL(t)
	_, prefix = testenv.Redis(t)
	for _, tb := range []string{table, otherTable} {
		if err := schema.Migrate(context.Background(), db.DB, tb); err != nil {
			t.Fatal(err)
		}
	}
	return node, chromium, db, prefix
}
