// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// readmeGrants returns README.md's mysql-grants statements by account, in order, with the schema
// written {db} and the account {user} (testenv.DB.Account's placeholders).
func readmeGrants(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range regexp.MustCompile(`(?m)^GRANT (.+) ON shop\.(\S+) TO '(\w+)'@'%';$`).FindAllStringSubmatch(string(b), -1) {
		out[m[3]] = append(out[m[3]], "GRANT "+m[1]+" ON {db}."+m[2]+" TO {user}")
	}
	if out["outbox_migrate"] == nil || out["outbox_relay"] == nil {
		t.Fatal("README.md's mysql-grants block lacks outbox_migrate or outbox_relay")
	}
	return out
}

// relayCLI runs an operator command of the relay binary and returns its output; it fails
// the test unless the exit code is want.
func relayCLI(t *testing.T, want int, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != want {
		t.Fatalf("outbox-relay %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
	}
	return string(out)
}

// The adoption path of docs/adopting.md (its numbered steps are marked below), end to end, with Apache RocketMQ: a Python order
// service whose seed-002 table holds history adopts the relay; a Java consumer (the JDBC
// recipe) and a Go consumer (rocketmqmw + SQLGuard) share one group and one dedupe table.
// The relay and the Java consumer are each killed with kill -9 while orders flow. Every
// committed order is applied exactly once, pending history is delivered, and neither rolled
// back orders, nor sent history, nor the rows the old relay gave up on are.
func TestAdoptionPathEndToEnd(t *testing.T) {
	b := &target{name: "rocketmq", nameServer: testenv.RocketMQ(t), brokerAddr: testenv.RocketMQBroker(), real: true}
	svc := testenv.MySQL(t)
	topic := b.topic(t, "adopt")

	// The service's seed-002 table, 90 days of history: sent rows, rows the old relay gave up
	// on, and rows still pending (which the relay must deliver).
	ddl, err := os.ReadFile(filepath.Join("..", "..", "schema", "testdata", "classicrelay.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exec(string(ddl)); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Exec("CREATE TABLE orders (order_no varchar(32) PRIMARY KEY, amount decimal(10,2) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var history []string
	for i := 1; i <= 12; i++ {
		status, retries, msgID := 2, 0, fmt.Sprintf("hist-sent-%d", i)
		switch {
		case i <= 2:
			status, retries, msgID = 1, 4, fmt.Sprintf("hist-gaveup-%d", i)
		case i <= 5:
			status, msgID = 0, fmt.Sprintf("hist-pending-%d", i)
			history = append(history, msgID)
		}
		if _, err := svc.Exec(`INSERT INTO local_message (id, msg_id, topic, tag, content, status, retry_count, create_time)
			VALUES (?, ?, ?, 'created', '{}', ?, ?, NOW() - INTERVAL 90 DAY)`, 1869000000000000000+i, msgID, topic, status, retries); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Grants, as the README writes them.
	grants := readmeGrants(t)
	migrator, relayDSN := svc.Account(t, grants["outbox_migrate"]...), svc.Account(t, grants["outbox_relay"]...)
	// 2. Look first, then migrate (in a maintenance window: the id step blocks writes).
	if out := relayCLI(t, 0, "migrate", "--mysql-dsn="+migrator, "--print-sql"); !strings.Contains(out, "BLOCKING") || !strings.Contains(out, "SET status = 3") {
		t.Fatalf("migrate --print-sql:\n%s", out)
	}
	if out := relayCLI(t, 0, "migrate", "--mysql-dsn="+migrator, "--allow-blocking"); !strings.Contains(out, "2 row(s) the previous relay gave up on") {
		t.Fatalf("migrate:\n%s", out)
	}
	// 3. The consumers' database gets the dedupe table, and nothing else.
	cdb := testenv.MySQL(t)
	relayCLI(t, 0, "migrate", "--mysql-dsn="+cdb.DSN, "--dedupe-table=stock_dedupe")
	_, prefix := testenv.Redis(t)
	w := &consumerWorld{e: &env{b: b, db: svc, prefix: prefix}, cdb: cdb, b: b, topic: topic,
		group: "stock_" + testenv.RandomSuffix(6), deps: newConsumerWorldDeps()}
	w.createEffectTable(t)

	// 4. The relay as a sidecar, with the relay's account.
	relay := w.e.startRelay(t, "OUTBOX_MYSQL_DSN="+relayDSN)
	// 5. Consumers: the Java recipe and a Go consumer in one group.
	java := w.startRecipe(t, consumerRecipes[0])
	var received atomic.Int64
	stopGo := w.startGo(t, &received)
	defer stopGo()

	// 6. The Python service writes orders (a third rolled back) and nudges after commit.
	cfg, err := mysql.ParseDSN(svc.DSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(cfg.Addr, ":")
	rhost, rport, _ := strings.Cut(testenv.RedisAddr(), ":")
	channel := outbox.NudgeChannelIn(outbox.DatabaseLabel(relayDSN), "local_message")
	var committed []string
	write := func(prefix string, orders int) {
		t.Helper()
		cmd := exec.Command("python3", "order_outbox.py")
		cmd.Dir = filepath.Join(recipesDir, "python")
		cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonDeps(w.deps),
			"RECIPE_MYSQL_HOST="+host, "RECIPE_MYSQL_PORT="+port, "RECIPE_MYSQL_USER="+cfg.User,
			"RECIPE_MYSQL_PASSWORD="+cfg.Passwd, "RECIPE_MYSQL_DATABASE="+cfg.DBName, "RECIPE_TOPIC="+topic,
			"RECIPE_ORDER_PREFIX="+prefix, fmt.Sprintf("RECIPE_ORDERS=%d", orders), "RECIPE_ROLLBACK_EVERY=3",
			"RECIPE_NUDGE_CHANNEL="+channel, "RECIPE_REDIS_HOST="+rhost, "RECIPE_REDIS_PORT="+rport)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("python writer: %v\n%s", err, out)
		}
		for i := range orders {
			if i%3 != 2 {
				committed = append(committed, fmt.Sprintf("%s%d", prefix, i))
			}
		}
	}
	applied := func(prefix string) int {
		n := 0
		for id := range w.applied(t) {
			if strings.Contains(id, ":created:"+prefix) {
				n++
			}
		}
		return n
	}

	write("py1-", 30)
	testenv.Eventually(t, 60*time.Second, "the first orders to flow", func() bool { return applied("py1-") >= 5 })
	relay.Kill9(t)
	write("py2-", 30) // committed while no relay runs
	relay = w.e.startRelay(t, "OUTBOX_MYSQL_DSN="+relayDSN)
	testenv.Eventually(t, 60*time.Second, "orders to flow again", func() bool { return applied("py2-") >= 5 })
	java.Kill9(t)
	write("py3-", 30)
	java = w.startRecipe(t, consumerRecipes[0])

	var want []string
	for _, o := range committed {
		want = append(want, topic+":created:"+o)
	}
	for _, h := range history {
		want = append(want, topic+":created:"+h) // seed 002 had no msg_keys: the msg_id is the key
	}
	testenv.Eventually(t, 120*time.Second, "every committed order and pending history row applied", func() bool {
		got := w.applied(t)
		for _, id := range want {
			if len(got[id]) == 0 {
				return false
			}
		}
		return true
	})
	got := w.applied(t)
	consumers := map[string]int{}
	for id, by := range got {
		if len(by) != 1 {
			t.Errorf("%s applied %d times, by %v", id, len(by), by)
		}
		consumers[by[0]]++
		if strings.Contains(id, "hist-sent-") || strings.Contains(id, "hist-gaveup-") {
			t.Errorf("%s was applied: history the old relay had sent or given up on", id)
		}
	}
	for _, o := range []string{"py1-2", "py2-5", "py3-29"} { // rolled back
		if len(got[topic+":created:"+o]) != 0 {
			t.Errorf("rolled-back order %s was applied", o)
		}
	}
	t.Logf("applied %d events (java %d, go %d); outbox rows sent %d", len(got), consumers["java"], consumers["go"], w.e.count(t, "status = 2"))
}

// newConsumerWorldDeps is where make sql-recipes-deps installs the recipes' dependencies.
func newConsumerWorldDeps() string {
	dir := os.Getenv("OUTBOX_SERVICES_DIR")
	if dir == "" {
		dir = "/tmp/outbox-relay-services"
	}
	return filepath.Join(dir, "sql-recipes")
}
