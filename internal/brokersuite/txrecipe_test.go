// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// txRecipes are docs/sql-recipes.md's transactional-message programs.
var txRecipes = []recipe{
	{lang: "java", file: "TxOrderOutbox.java", heading: "## Transactional messages in Java (TransactionMQProducer)",
		command: func(deps string) ([]string, []string, string) {
			return []string{"java", "-cp", filepath.Join(deps, "java", "*"), "TxOrderOutbox.java"}, nil, filepath.Join(deps, "java", ".complete")
		}},
}

// txRecipeCmd returns the command that runs the Java transactional recipe over orders
// ("order:mode", mode commit, rollback or halt), skipping the test when Java or the recipe's
// dependencies are missing.
func (w *consumerWorld) txRecipeCmd(ctx context.Context, t *testing.T, group string, orders ...string) *exec.Cmd {
	t.Helper()
	r := txRecipes[0]
	argv, _, installed := r.command(w.deps)
	if _, err := os.Stat(installed); err != nil {
		missing(t, "java recipe dependencies (make sql-recipes-deps)", err)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		missing(t, argv[0], err)
	}
	cfg, err := mysql.ParseDSN(w.cdb.DSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(cfg.Addr, ":")
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = filepath.Join(recipesDir, r.lang)
	cmd.Env = append(os.Environ(),
		"RECIPE_MYSQL_HOST="+host, "RECIPE_MYSQL_PORT="+port, "RECIPE_MYSQL_USER="+cfg.User,
		"RECIPE_MYSQL_PASSWORD="+cfg.Passwd, "RECIPE_MYSQL_DATABASE="+cfg.DBName, "RECIPE_TOPIC="+w.topic,
		"RECIPE_GROUP="+group, "RECIPE_SECRET="+txSecret, "RECIPE_NAMESRV="+w.b.nameServer, "RECIPE_ORDERS="+strings.Join(orders, ","))
	return cmd
}

// runTxRecipe runs the Java transactional recipe over orders (txRecipeCmd) and returns its
// output; a halted run exits with status 3.
func (w *consumerWorld) runTxRecipe(t *testing.T, group string, halts bool, orders ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	out, err := w.txRecipeCmd(ctx, t, group, orders...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case halts && errors.As(err, &exit) && exit.ExitCode() == 3:
	case halts:
		t.Fatalf("the Java writer did not halt (exit status 3): %v\n%s", err, out)
	case err != nil:
		t.Fatalf("the Java writer: %v\n%s", err, out)
	}
	return string(out)
}

// producerClients returns the client ids the broker at addr lists as connected producers of
// group (GET_PRODUCER_CONNECTION_LIST); none when it knows no producer of the group.
func producerClients(t *testing.T, addr, group string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const getProducerConnectionList = 204
	r, err := remoting.Call(ctx, addr, getProducerConnectionList, map[string]string{"producerGroup": group}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Code != 0 {
		if strings.Contains(r.Remark, "not exist") {
			return nil
		}
		t.Fatalf("producer connections of %s at %s: code %d %s", group, addr, r.Code, r.Remark)
	}
	var list struct {
		ConnectionSet []struct {
			ClientID string `json:"clientId"`
		} `json:"connectionSet"`
	}
	if err := json.Unmarshal(r.Body, &list); err != nil {
		t.Fatalf("producer connections of %s: %v: %s", group, err, r.Body)
	}
	var ids []string
	for _, c := range list.ConnectionSet {
		ids = append(ids, c.ClientID)
	}
	return ids
}

// TestJavaTransactionalRecipeWarmsItsProducer: the Java recipe starts its producer warmed,
// so that a deploy's first order does not pay for the producer's cold start (its topic's
// route, the connection to the broker) within the half-send's timeout: once the producer has
// started, before any order, the broker already lists it as a producer of the group (the route
// was fetched and the broker connected). The first order then goes out as a half, and its row
// stays handed.
func TestJavaTransactionalRecipeWarmsItsProducer(t *testing.T) {
	w := newConsumerWorld(t)
	if _, err := w.cdb.Exec("CREATE TABLE orders (order_no varchar(32) PRIMARY KEY, amount decimal(10,2) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	group := "outbox_tx_warm_" + testenv.RandomSuffix(8)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := w.txRecipeCmd(ctx, t, group, "tx-first:commit")
	cmd.Env = append(cmd.Env, "RECIPE_AWAIT_GO=1")
	var out testenv.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	goOn, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	testenv.Eventually(t, 110*time.Second, "the Java writer's producer started", func() bool {
		return strings.Contains(out.String(), "producer started\n")
	})
	if ids := producerClients(t, w.b.brokerAddr, group); len(ids) == 0 {
		t.Fatalf("the started producer is unknown to the broker before its first order: its first half-send pays for the route and the connection\n%s", out.String())
	}
	if _, err := io.WriteString(goOn, "go\n"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the Java writer: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "committed tx-first\n") {
		t.Fatalf("the Java writer did not commit its order:\n%s", out.String())
	}
	if id := w.msgID(t, "tx-first"); w.e.count(t, "msg_id = ? AND status = 4", id) != 1 {
		t.Fatalf("the first order's row is not handed (its half was not stored):\n%s", out.String())
	}
}

// msgID returns the msg_id of the outbox row of an order ("" when there is none).
func (w *consumerWorld) msgID(t *testing.T, orderNo string) string {
	t.Helper()
	ids := w.e.strings(t, "SELECT msg_id FROM local_message WHERE msg_keys = '"+orderNo+"'")
	if len(ids) == 0 {
		return ""
	}
	return ids[0]
}

// discarded reports whether the broker has written a half carrying msgID to
// TRANS_CHECK_MAX_TIME_TOPIC (opts: WithCredentials for a broker with ACL).
func discarded(t *testing.T, broker, msgID string, opts ...remoting.Option) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, broker, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for off := int64(0); ; {
		p, err := c.Pull(ctx, "suite_discards", "TRANS_CHECK_MAX_TIME_TOPIC", 0, off, 32)
		if errors.Is(err, remoting.ErrTopicNotExist) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Messages) == 0 {
			return false
		}
		for _, m := range p.Messages {
			if m.Properties[outbox.MsgIDProperty] == msgID {
				return true
			}
			off = m.QueueOffset + 1
		}
	}
}

// checkWindow bounds how long the broker at addr checks an unresolved half before discarding
// it, from its configuration (GET_BROKER_CONFIG): transactionTimeOut, then transactionCheckMax
// check rounds and the discarding one, each round starting transactionCheckInterval after the
// previous one's work ended (counted as long again, for a loaded machine), and a round more.
func checkWindow(t *testing.T, addr string, opts ...remoting.Option) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const getBrokerConfig = 26
	r, err := remoting.Call(ctx, addr, getBrokerConfig, nil, nil, opts...)
	if err != nil || r.Code != 0 {
		t.Fatalf("broker configuration of %s: %v %+v", addr, err, r)
	}
	conf := map[string]int64{}
	for _, line := range strings.Split(string(r.Body), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				conf[k] = n
			}
		}
	}
	timeout, interval, max := conf["transactionTimeOut"], conf["transactionCheckInterval"], conf["transactionCheckMax"]
	if interval <= 0 || max <= 0 {
		t.Fatalf("broker %s reports no transactionCheckInterval or transactionCheckMax", addr)
	}
	return time.Duration(timeout+2*(max+2)*interval) * time.Millisecond
}

// The Java recipe of docs/sql-recipes.md (the official client's TransactionMQProducer, handed
// rows of status 4) against Apache RocketMQ 5.3.3, with the relay answering check-backs and
// a Go consumer applying events through the idempotency package:
//   - committed and ended: delivered once, by the broker (its END, or a check's COMMIT when
//     the client's one-way END is lost); the relay never sends the row;
//   - rolled back after the half: nothing delivered, no row;
//   - the JVM halted between its commit and its END_TRANSACTION: the relay's check answer
//     (COMMIT) delivers it, the row is marked sent, the consumer applies it once;
//   - the same with the relay down for the broker's whole check window (15 checks): the half
//     is discarded, and the relay, once back, reads TRANS_CHECK_MAX_TIME_TOPIC and sends the
//     row itself; applied once.
//
// Not parallel: the JVMs' halves would interleave with other tests' in the relay's log.
func TestJavaTransactionalRecipe(t *testing.T) {
	w := newConsumerWorld(t)
	if _, err := w.cdb.Exec("CREATE TABLE orders (order_no varchar(32) PRIMARY KEY, amount decimal(10,2) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	group := "outbox_tx_java_" + testenv.RandomSuffix(8)
	relayEnv := []string{"OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS=" + group, txSecretEnv, "OUTBOX_LOG_LEVEL=debug"}
	relay := w.e.startRelay(t, relayEnv...)
	testenv.Eventually(t, 30*time.Second, "the relay answering check-backs", func() bool {
		return strings.Contains(relay.Out.String(), "answering transactional check-backs")
	})
	in := w.b.consume(t, w.topic)
	var received atomic.Int64
	stop := w.startGo(t, &received)
	defer stop()
	appliedOnce := func(orderNo string) {
		t.Helper()
		id := w.identity(event{"created", orderNo})
		testenv.Eventually(t, checkBudget, orderNo+" applied", func() bool { return len(w.applied(t)[id]) > 0 })
		if n := len(w.applied(t)[id]); n != 1 {
			t.Fatalf("%s applied %d times, want once", orderNo, n)
		}
	}

	// A clean run first: its one-way ENDs are flushed when the producer shuts down (a halted
	// JVM also loses the ENDs still queued in the client, which would turn the normal path into
	// the halted one).
	out := w.runTxRecipe(t, group, false, "tx-ok:commit", "tx-rb:rollback")
	out += w.runTxRecipe(t, group, true, "tx-killed:halt")
	for _, line := range []string{"committed tx-ok", "rolled back tx-rb", "done", "halting after the commit of tx-killed"} {
		if !strings.Contains(out, line+"\n") {
			t.Fatalf("the Java writer did not print %q:\n%s", line, out)
		}
	}
	ok, killed := w.msgID(t, "tx-ok"), w.msgID(t, "tx-killed")
	if ok == "" || killed == "" || w.msgID(t, "tx-rb") != "" {
		t.Fatalf("outbox rows: tx-ok %q, tx-killed %q, tx-rb %q; want the committed two only", ok, killed, w.msgID(t, "tx-rb"))
	}

	// The halted writer's message: the relay's check answer commits it.
	appliedOnce("tx-killed")
	testenv.Eventually(t, 10*time.Second, "the halted writer's row marked sent by the responder", func() bool {
		return w.e.count(t, "msg_id = ? AND status = 2", killed) == 1
	})
	if !answered(relay.Out.String(), killed, "handed_commit") {
		t.Fatalf("the halted writer's message was not committed by the relay's check answer\n%s", tail(relay.Out.String(), 3000))
	}
	// The ended one: delivered by the broker, never sent by the relay. Its row stays handed
	// when the client's END lands. The official client sends END one-way and does not retry
	// it; when it is lost or comes late (seen here on a loaded machine: no END within 4 s),
	// the checks find the row handed, answer UNKNOWN within the responder's END grace, and
	// then COMMIT, which marks the row sent. Which of the two happened is the client's
	// timing; that the relay never sent the row, and that it reached the topic once (below),
	// is what the test holds.
	appliedOnce("tx-ok")
	handed := w.e.count(t, "msg_id = ? AND status = 4 AND sent_time = 0", ok) == 1
	committedByCheck := w.e.count(t, "msg_id = ? AND status = 2", ok) == 1 && answered(relay.Out.String(), ok, "handed_commit")
	if !handed && !committedByCheck {
		t.Fatalf("the ended message's row is neither handed nor committed by a check (%v): the relay touched it\n%s",
			w.e.strings(t, "SELECT CONCAT(status, ' ', sent_time, ' ', COALESCE(fail_reason, '')) FROM local_message WHERE msg_id = '"+ok+"'"), tail(relay.Out.String(), 4000))
	}
	if handed && answered(relay.Out.String(), ok, "handed_commit") {
		t.Fatal("a check committed the ended message but its row is still handed")
	}
	if committedByCheck {
		t.Log("the ended message's END did not reach the broker in time: a check committed it")
	}

	// The relay down for the whole check window: the half is discarded, then recovered.
	relay.Kill9(t)
	w.runTxRecipe(t, group, true, "tx-discarded:halt")
	lost := w.msgID(t, "tx-discarded")
	testenv.Eventually(t, checkWindow(t, w.b.brokerAddr), "the broker to discard the half after its last check", func() bool {
		return discarded(t, w.b.brokerAddr, lost)
	})
	if n := w.e.count(t, "msg_id = ? AND status = 4", lost); n != 1 {
		t.Fatal("the discarded half's row is not handed")
	}
	relay = w.e.startRelay(t, relayEnv...)
	appliedOnce("tx-discarded")
	testenv.Eventually(t, 10*time.Second, "the recovered row sent by the relay", func() bool {
		return w.e.count(t, "msg_id = ? AND status = 2", lost) == 1
	})
	if !strings.Contains(relay.Out.String(), "the broker discarded a handed row's half") {
		t.Fatalf("the row was not recovered from TRANS_CHECK_MAX_TIME_TOPIC\n%s", tail(relay.Out.String(), 3000))
	}

	// Every copy consumed once: nothing sent twice, the rolled-back order never.
	testenv.Eventually(t, 30*time.Second, "the Go consumer to handle the three messages", func() bool { return received.Load() >= 3 })
	in.wait(t, 3, 30*time.Second)
	for order, id := range map[string]string{"tx-ok": ok, "tx-killed": killed, "tx-discarded": lost} {
		if n := in.copies(id); n != 1 {
			t.Errorf("%s reached the topic %d times, want once", order, n)
		}
	}
	in.mu.Lock()
	all := in.all
	in.mu.Unlock()
	if n := len(w.applied(t)[w.identity(event{"created", "tx-rb"})]); n != 0 || all != 3 {
		t.Errorf("the rolled-back order applied %d times; %d messages consumed, want 3", n, all)
	}
}
