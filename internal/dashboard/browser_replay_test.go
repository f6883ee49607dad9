// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestBrowserReplay drives the replay of the real relay binary's dashboard in headless
// Chromium (testdata/browser/replay.mjs): with the admin token, a sent message is replayed
// from its page after the dry run's count is confirmed, and its timeline shows the replay; then
// an order's three events are replayed through the explorer's filter. The broker holds each
// copy once more, marked, and no row changed.
func TestBrowserReplay(t *testing.T) {
	node, chromium, db, prefix := browserSetup(t)
	for _, id := range []string{"order-5001-created", "order-5001-paid", "order-5001-shipped"} {
		if _, err := db.Exec("INSERT INTO `"+table+"` (msg_id, topic, content, msg_keys) VALUES (?, 'orders', '{}', 'SN-5001')", id); err != nil {
			t.Fatal(err)
		}
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	relay := startRelayBinary(t, db, prefix, broker, "OUTBOX_HTTP_ADMIN_TOKEN="+adminToken)
	sent := func() int {
		var n int
		_ = db.QueryRow("SELECT COUNT(*) FROM `" + table + "` WHERE status = 2").Scan(&n)
		return n
	}
	testenv.Eventually(t, 30*time.Second, "the order's events sent", func() bool { return sent() == 3 })
	seed, _ := json.Marshal(map[string]any{"table": table, "order": "SN-5001", "one": "order-5001-paid", "events": 3})
	nctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(nctx, node, filepath.Join(browserDir, "replay.mjs"))
	cmd.Env = append(os.Environ(), "BASE_URL="+relay.base, "ADMIN_TOKEN="+adminToken, "SEED="+string(seed),
		"SHOTS="+os.Getenv("OUTBOX_TEST_SCREENSHOTS"), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("browser:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	marked := 0
	for _, m := range broker.Messages("orders") {
		if m.Properties[outbox.ReplayProperty] != "" {
			marked++
		}
	}
	if n := broker.Count("orders"); n != 7 || marked != 4 || sent() != 3 {
		t.Fatalf("the broker holds %d messages (%d marked as replays), %d rows sent; want 7, 4 and 3", n, marked, sent())
	}
}
