// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
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

// browserDir holds the Playwright script and its package.json; scripts/browser-test.sh runs
// `npm ci` there.
const browserDir = "testdata/browser"

// missingTool skips the test on a developer machine and fails it under CI=true.
func missingTool(t testing.TB, what string) {
	t.Helper()
	msg := what + " is missing: run scripts/browser-test.sh (or `make test-browser`), which installs it"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// browserTools returns node and Chromium, or skips (fails under CI) when one is missing.
func browserTools(t testing.TB) (node, chromium string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		missingTool(t, "node")
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		missingTool(t, "Chromium ("+chromium+", Debian's chromium package)")
	}
	if _, err := os.Stat(filepath.Join(browserDir, "node_modules", "playwright-core")); err != nil {
		missingTool(t, "playwright-core (npm ci in internal/dashboard/"+browserDir+")")
	}
	return node, chromium
}

// relayProcess is `outbox-relay run` started by a test.
type relayProcess struct {
	cmd  *exec.Cmd
	out  *testenv.SyncBuffer
	base string // the dashboard's URL
}

// startRelayBinary builds the relay and runs it against db (tables table and otherTable),
// Redis under prefix and broker, with the dashboard on a free port, until the test ends.
func startRelayBinary(t testing.TB, db *testenv.DB, prefix string, broker *rmqtest.Server, extra ...string) *relayProcess {
	return startRelayOn(t, 2, append([]string{"OUTBOX_MYSQL_DSN=" + db.DSN, "OUTBOX_MYSQL_TABLES=" + table + "," + otherTable,
		"OUTBOX_LOCK_KEY=" + prefix + "lock:{table}"}, extra...), broker)
}

// startRelayOn runs the relay with the environment dbEnv (its databases, tables and lock
// key) and broker, and waits until it leads all its tables (there are tables of them).
func startRelayOn(t testing.TB, tables int, dbEnv []string, broker *rmqtest.Server) *relayProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	build := exec.Command("go", "build", "-o", bin, "github.com/outbox-relay/outbox-relay/cmd/outbox-relay")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the relay: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &relayProcess{out: &testenv.SyncBuffer{}, base: "http://" + addr + "/ui/"}
	p.cmd = exec.Command(bin, "run")
	p.cmd.Env = append(os.Environ(),
		"OUTBOX_REDIS_ADDR="+testenv.RedisAddr(),
		"OUTBOX_ROCKETMQ_NAMESERVERS="+broker.NameServerAddr(),
		"OUTBOX_LOCK_TTL=3s",
		"OUTBOX_RELAY_POLL_INTERVAL=200ms",
		"OUTBOX_HTTP_ADDR="+addr,
		"OUTBOX_LOG_FORMAT=json",
	)
	p.cmd.Env = append(p.cmd.Env, dbEnv...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("relay output:\n%s", p.out.String())
		}
	})
	// Ready when the dashboard answers and the relay leads every table.
	testenv.Eventually(t, 30*time.Second, "the relay to serve the dashboard and lead every table", func() bool {
		var o Overview
		resp, err := http.Get(p.base + "api/overview")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		if json.NewDecoder(resp.Body).Decode(&o) != nil || len(o.Tables) != tables {
			return false
		}
		for _, tv := range o.Tables {
			if tv.Lock.PID != p.cmd.Process.Pid {
				return false
			}
		}
		return true
	})
	return p
}

// TestBrowser drives the dashboard of the real relay binary in headless Chromium
// (testdata/browser/dashboard.mjs): counts, a hostile body shown as text, requeue refused
// without the token and from another site, then requeue of one, a selection and a filter,
// each delivered by the running relay. OUTBOX_TEST_SCREENSHOTS=dir keeps the screenshots there.
func TestBrowser(t *testing.T) {
	node, chromium, db, prefix := browserSetup(t)
	ctx := context.Background()
	// Rows the relay leaves alone (delayed, retrying later, sent) and dead rows to requeue.
	later := time.Now().Add(time.Hour).UnixMilli()
	mustExec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	seedSent := func(tb string, n int) {
		var sb strings.Builder
		for i := 0; i < n; i++ {
			if i > 0 {
				sb.WriteString(",")
			}
			// Spread over the last hour, busier lately, so the activity has a shape.
			age := int(3500 * math.Pow(float64(i)/float64(n), 1.3))
			fmt.Fprintf(&sb, "('%s-sent-%d', 'orders', '{}', 2, NOW() - INTERVAL %d SECOND, (UNIX_TIMESTAMP(NOW()) - %d) * 1000)", tb, i, age, age)
		}
		// A sent row's next_retry_time is when it was sent, as the relay writes it.
		mustExec("INSERT INTO `" + tb + "` (msg_id, topic, content, status, update_time, next_retry_time) VALUES " + sb.String())
	}
	seedSent(table, 1234)
	seedSent(otherTable, 321)
	for i := 0; i < 5; i++ {
		mustExec("INSERT INTO `"+table+"` (msg_id, topic, content, status, next_retry_time) VALUES (?, 'orders', '{}', 0, ?)", fmt.Sprintf("delayed-%d", i), later)
	}
	for i := 0; i < 4; i++ {
		mustExec("INSERT INTO `"+table+"` (msg_id, topic, content, status, retry_count, next_retry_time, fail_reason) VALUES (?, 'orders', '{}', 1, 2, ?, 'broker busy')", fmt.Sprintf("retrying-%d", i), later)
	}
	hostileBody := `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`
	hostileReason := `<img src=x onerror="window.__pwned=3">`
	dead := func(msgID, body, reason string, age int) {
		mustExec("INSERT INTO `"+table+"` (msg_id, topic, tag, content, status, retry_count, fail_reason, create_time, update_time, next_retry_time)"+
			" VALUES (?, 'orders', 'paid', ?, 3, 4, ?, NOW() - INTERVAL ? SECOND, NOW() - INTERVAL ? SECOND, (UNIX_TIMESTAMP(NOW()) - ?) * 1000)", msgID, body, reason, age+600, age, age)
	}
	dead("hostile-1", hostileBody, hostileReason, 900)
	dead("order-1001", `{"order":1001}`, "send: connection refused", 1500)
	dead("order-1002", `{"order":1002}`, "send: connection refused", 1400)
	for i := 0; i < 3; i++ {
		dead(fmt.Sprintf("order-20%02d", i), `{"order":"20`+fmt.Sprint(i)+`"}`, "send: request timeout after 3s", 600+i*60)
	}

	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	relay := startRelayBinary(t, db, prefix, broker, "OUTBOX_HTTP_ADMIN_TOKEN="+adminToken)

	// Another site: a blank page on another loopback address (127.0.0.2 is another site
	// than 127.0.0.1 for the browser).
	otherLn, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &httptest.Server{Listener: otherLn, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>another site</title>")
	})}}
	other.Start()
	t.Cleanup(other.Close)

	seed, _ := json.Marshal(map[string]any{
		"table":         table,
		"counts":        map[string]int{"pending": 5, "failed": 4, "sent": 1234, "dead": 6},
		"hostile":       map[string]string{"msg_id": "hostile-1", "body": hostileBody, "reason": hostileReason},
		"selected":      []string{"order-1001", "order-1002"},
		"reason_filter": "timeout",
		"reason_count":  3,
	})
	shots := os.Getenv("OUTBOX_TEST_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	nctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(nctx, node, filepath.Join(browserDir, "dashboard.mjs"))
	cmd.Env = append(os.Environ(), "BASE_URL="+relay.base, "OTHER_URL="+other.URL+"/", "ADMIN_TOKEN="+adminToken,
		"SEED="+string(seed), "SHOTS="+shots, "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("browser:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}

	// Every dead row was requeued through the page and delivered by the running relay.
	var notSent int
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + table + "` WHERE (msg_id LIKE 'order-%' OR msg_id = 'hostile-1') AND status <> 2").Scan(&notSent); err != nil {
		t.Fatal(err)
	}
	if notSent != 0 {
		t.Fatalf("%d requeued rows are not sent", notSent)
	}
	bodies := map[string]bool{}
	for _, m := range broker.Messages("orders") {
		bodies[string(m.Body)] = true
	}
	if !bodies[hostileBody] || !bodies[`{"order":1001}`] || !bodies[`{"order":"202"}`] {
		t.Fatalf("the broker lacks requeued messages; it has %d bodies", len(bodies))
	}
	if strings.Contains(relay.out.String(), adminToken) {
		t.Fatal("the relay logged the admin token")
	}
}

// TestBrowserTwoDatabases drives the dashboard of a relay serving two databases
// (testdata/browser/databases.mjs): a card per database, the table selector naming the
// database, and a requeue that acts on the database chosen, delivered by the running relay.
func TestBrowserTwoDatabases(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the browser test builds and runs the relay")
	}
	node, chromium := browserTools(t)
	rlog.SetLogLevel("error")
	_, prefix := testenv.Redis(t)
	shopA, shopB := testenv.MySQL(t), testenv.MySQL(t)
	for name, db := range map[string]*testenv.DB{"shop-a": shopA, "shop-b": shopB} {
		if err := schema.Migrate(context.Background(), db.DB, table); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec("INSERT INTO `"+table+"` (msg_id, topic, content, status, fail_reason) VALUES ('order-1', 'orders', ?, 3, 'boom')", "from "+name); err != nil {
			t.Fatal(err)
		}
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	dbs, _ := json.Marshal([]map[string]string{{"name": "shop-a", "dsn": shopA.DSN}, {"name": "shop-b", "dsn": shopB.DSN}})
	relay := startRelayOn(t, 2, []string{"OUTBOX_DATABASES=" + string(dbs), "OUTBOX_LOCK_KEY=" + prefix + "lock:{db}:{table}",
		"OUTBOX_HTTP_ADMIN_TOKEN=" + adminToken}, broker)

	seed, _ := json.Marshal(map[string]string{"table": table, "msg_id": "order-1"})
	nctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(nctx, node, filepath.Join(browserDir, "databases.mjs"))
	cmd.Env = append(os.Environ(), "BASE_URL="+relay.base, "ADMIN_TOKEN="+adminToken, "SEED="+string(seed), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("browser:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	if a, b := msgStatus(t, shopA, "order-1"), msgStatus(t, shopB, "order-1"); a != 3 || b != 2 {
		t.Fatalf("shop-a's row has status %d (want 3, untouched), shop-b's %d (want 2, sent)", a, b)
	}
	if msgs := broker.Messages("orders"); len(msgs) != 1 || string(msgs[0].Body) != "from shop-b" {
		t.Fatalf("the broker has %d messages, want shop-b's only", len(msgs))
	}
}

// TestBrowserReadToken drives the dashboard as a relay off loopback serves it, bodies behind
// http.read_token (testdata/browser/readtoken.mjs): the dead list and bodies are refused
// until the read token is entered in the page, then a hostile body still renders as text.
// The page is this package's dashboard without open reads, as the relay builds it for a
// non-loopback http.addr (cmd/outbox-relay TestBodiesNeedATokenOffLoopback), served on a
// loopback test listener so that no test server listens off loopback. Beside it the relay
// binary runs with the same read token, on loopback, and must never log it.
func TestBrowserReadToken(t *testing.T) {
	node, chromium, db, prefix := browserSetup(t)
	ctx := context.Background()
	hostileBody := `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">`
	hostileReason := `<img src=x onerror="window.__pwned=3">`
	if _, err := db.Exec("INSERT INTO `"+table+"` (msg_id, topic, content, status, fail_reason) VALUES ('hostile-1', 'orders', ?, 3, ?)", hostileBody, hostileReason); err != nil {
		t.Fatal(err)
	}
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	const readToken = "read-token-for-the-browser-test"
	relay := startRelayOn(t, 2, []string{"OUTBOX_MYSQL_DSN=" + db.DSN, "OUTBOX_MYSQL_TABLES=" + table + "," + otherTable,
		"OUTBOX_LOCK_KEY=" + prefix + "lock:{table}", "OUTBOX_HTTP_READ_TOKEN=" + readToken}, broker)
	base := serveReadLocked(t, db, prefix, readToken)
	seed, _ := json.Marshal(map[string]any{"table": table, "hostile": map[string]string{"msg_id": "hostile-1", "body": hostileBody, "reason": hostileReason}})
	nctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(nctx, node, filepath.Join(browserDir, "readtoken.mjs"))
	cmd.Env = append(os.Environ(), "BASE_URL="+base, "READ_TOKEN="+readToken, "SEED="+string(seed), "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	t.Logf("browser:\n%s", out)
	if err != nil {
		t.Fatalf("the browser test failed: %v", err)
	}
	if strings.Contains(relay.out.String(), readToken) {
		t.Fatal("the relay logged the read token")
	}
}

// serveReadLocked serves the dashboard of db's tables with bodies behind readToken (no open
// reads) on a loopback test server and returns the page's URL.
func serveReadLocked(t *testing.T, db *testenv.DB, prefix, readToken string) string {
	t.Helper()
	rdb, _ := testenv.Redis(t)
	d, err := New(rdb, Config{ReadToken: readToken, Databases: []Source{{Name: "default", Label: "db-server/" + db.Name,
		DB: db.DB, Tables: []string{table, otherTable}, LockKey: func(t string) string { return prefix + "lock:" + t }}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := d.Start(ctx); err != nil {
		cancel()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", d)
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); d.Stop(); cancel() })
	return srv.URL + "/ui/"
}
