// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"cmp"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/idempotency"
	"github.com/outbox-relay/outbox-relay/idempotency/rocketmqmw"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/schema"
)

// consumerRecipe is one of docs/sql-recipes.md's consumer programs in examples/sql-recipes.
var consumerRecipes = []recipe{
	{lang: "java", file: "StockConsumer.java", heading: "## Consuming exactly once in Java (JDBC)",
		command: func(deps string) ([]string, []string, string) {
			return []string{"java", "-cp", filepath.Join(deps, "java", "*"), "StockConsumer.java"}, nil, filepath.Join(deps, "java", ".complete")
		}},
	{lang: "python", file: "stock_consumer.py", heading: "## Consuming exactly once in Python",
		command: func(deps string) ([]string, []string, string) {
			d := pythonDeps(deps)
			return []string{"python3", "stock_consumer.py"}, []string{"PYTHONPATH=" + d}, filepath.Join(d, "rocketmq")
		}},
}

// consumerWorld is a database with the outbox table, SQLGuard's dedupe table and the effect
// table stock_applied (one row per effect, by identity and consumer), a topic on Apache
// RocketMQ and the relay publishing to it.
type consumerWorld struct {
	e     *env
	cdb   *testenv.DB // the consumers' database: the dedupe and effect tables
	b     *target
	topic string
	group string
	deps  string
}

func newConsumerWorld(t *testing.T) *consumerWorld {
	t.Helper()
	b := &target{name: "rocketmq", nameServer: testenv.RocketMQ(t), brokerAddr: testenv.RocketMQBroker(), real: true}
	w := &consumerWorld{e: newEnv(t, b), b: b, group: "stock_" + testenv.RandomSuffix(6),
		deps: filepath.Join(cmp.Or(os.Getenv("OUTBOX_SERVICES_DIR"), "/tmp/outbox-relay-services"), "sql-recipes")}
	w.topic = b.topic(t, "stock")
	w.cdb = w.e.db
	ddl, err := schema.DedupeDDL("stock_dedupe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.cdb.Exec(ddl); err != nil {
		t.Fatal(err)
	}
	w.createEffectTable(t)
	return w
}

// createEffectTable creates stock_applied in the consumers' database.
func (w *consumerWorld) createEffectTable(t *testing.T) {
	t.Helper()
	if _, err := w.cdb.Exec("CREATE TABLE stock_applied (id bigint AUTO_INCREMENT PRIMARY KEY, identity varchar(300) NOT NULL, consumer varchar(16) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
}

// event is one outbox row: the order's event named by its tag, keyed by the order number.
type event struct{ tag, keys string }

// identity is the dedupe key Go's rocketmqmw (TopicTagIdentity of KeyFromKeys) stores.
func (w *consumerWorld) identity(ev event) string { return w.topic + ":" + ev.tag + ":" + ev.keys }

func (w *consumerWorld) write(t *testing.T, evs ...event) {
	t.Helper()
	msgs := make([]outbox.Message, len(evs))
	for i, ev := range evs {
		msgs[i] = outbox.Message{Topic: w.topic, Tag: ev.tag, Keys: strings.Fields(ev.keys), Body: []byte(`{"event":"` + ev.tag + `"}`)}
	}
	w.e.insert(t, msgs...)
}

// resend makes every sent row pending again: the relay publishes each a second time, as it
// does after a crash between the broker's ack and its write-back (new message ids included).
func (w *consumerWorld) resend(t *testing.T) {
	t.Helper()
	if _, err := w.e.db.Exec("UPDATE local_message SET status = 0, sent_time = 0 WHERE status = 2"); err != nil {
		t.Fatal(err)
	}
	_ = w.e.writer.Nudge(context.Background())
}

// applied returns the effects recorded: identity -> consumers that applied it.
func (w *consumerWorld) applied(t *testing.T) map[string][]string {
	t.Helper()
	rows, err := w.cdb.Query("SELECT identity, consumer FROM stock_applied ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var id, c string
		if err := rows.Scan(&id, &c); err != nil {
			t.Fatal(err)
		}
		out[id] = append(out[id], c)
	}
	return out
}

// startRecipe starts a consumer recipe program of the world's group.
func (w *consumerWorld) startRecipe(t *testing.T, r recipe) *testenv.Proc {
	t.Helper()
	argv, extraEnv, installed := r.command(w.deps)
	if _, err := os.Stat(installed); err != nil {
		missing(t, r.lang+" consumer dependencies (make sql-recipes-deps)", err)
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		missing(t, argv[0], err)
	}
	cfg, err := mysql.ParseDSN(w.cdb.DSN)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(cfg.Addr, ":")
	bin, err := exec.LookPath(argv[0])
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), extraEnv...)
	env = append(env, "RECIPE_MYSQL_HOST="+host, "RECIPE_MYSQL_PORT="+port, "RECIPE_MYSQL_USER="+cfg.User,
		"RECIPE_MYSQL_PASSWORD="+cfg.Passwd, "RECIPE_MYSQL_DATABASE="+cfg.DBName, "RECIPE_TOPIC="+w.topic,
		"RECIPE_GROUP="+w.group, "RECIPE_NAMESRV="+w.b.nameServer)
	// The program by its absolute path: StartProc runs in the test's directory.
	prog, err := filepath.Abs(filepath.Join(recipesDir, r.lang, r.file))
	if err != nil {
		t.Fatal(err)
	}
	args := append(slices.Clone(argv[1:len(argv)-1]), prog)
	p := testenv.StartProc(t, env, bin, args...)
	testenv.Eventually(t, 60*time.Second, r.lang+" consumer to start", func() bool { return strings.Contains(p.Out.String(), "started") })
	return p
}

// startGo starts a Go consumer of the world's group: rocketmqmw with SQLGuard on the same
// dedupe table, as the README's "Consuming exactly once" shows. received counts the messages
// it has handled (applied or skipped).
func (w *consumerWorld) startGo(t *testing.T, received *atomic.Int64) (stop func()) {
	t.Helper()
	guard, err := idempotency.NewSQLGuard(idempotency.SQLConfig{Group: w.group, Table: "stock_dedupe"})
	if err != nil {
		t.Fatal(err)
	}
	mw, err := rocketmqmw.NewTx(guard, w.cdb.DB, rocketmqmw.Config{}, func(ctx context.Context, tx *sql.Tx, m *primitive.MessageExt) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO stock_applied (identity, consumer) VALUES (?, 'go')", rocketmqmw.TopicTagIdentity(m, m.GetKeys()))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c, err := rocketmq.NewPushConsumer(consumer.WithGroupName(w.group),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{w.b.nameServer})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance("go-"+testenv.RandomSuffix(6)))
	if err != nil {
		t.Fatal(err)
	}
	consume := func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		res, err := mw.Consume(ctx, msgs...)
		if res == consumer.ConsumeSuccess {
			received.Add(int64(len(msgs)))
		}
		return res, err
	}
	if err := c.Subscribe(w.topic, consumer.MessageSelector{}, consume); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return func() { mw.Close(); _ = c.Shutdown() }
}

// sigterm stops a consumer program gracefully (it commits its consume offsets).
func sigterm(t *testing.T, p *testenv.Proc) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Wait(60 * time.Second); !ok {
		t.Fatal("consumer did not stop within 60s of SIGTERM")
	}
}

// Rows 5, 6 and 14 of issue 26: consumers in Java and Python dedupe exactly as the Go
// SQLGuard does, in its table, so one consumer group may mix them. The Java consumer applies
// the first events (one with an empty tag, which Java receives as null); every row is then
// published again (new message ids, as after a relay crash) with new events, and the Python
// consumer, then the Go one, take over the group: each applies only the new events, skipping
// the others' as duplicates. Every event is applied exactly once, and `paid` after `created`
// of the same order is applied, not dropped.
func TestConsumerRecipesShareSQLGuardsTable(t *testing.T) {
	w := newConsumerWorld(t)
	w.e.startRelay(t)
	var all []event
	round := func(orders ...string) []event {
		var evs []event
		for _, o := range orders {
			evs = append(evs, event{"created", o}, event{"paid", o})
		}
		return evs
	}
	waitApplied := func(who string, evs []event) {
		t.Helper()
		testenv.Eventually(t, 90*time.Second, who+" to apply its events", func() bool {
			got := w.applied(t)
			for _, ev := range evs {
				if len(got[w.identity(ev)]) == 0 {
					return false
				}
			}
			return true
		})
	}

	// Java: the first events, with an event whose tag is empty.
	first := append(round("SN-1", "SN-2", "SN-3"), event{"", "SN-1 note-1"})
	w.write(t, first...)
	all = append(all, first...)
	java := w.startRecipe(t, consumerRecipes[0])
	waitApplied("the Java consumer", first)
	testenv.Eventually(t, 30*time.Second, "every row sent", func() bool { return w.e.count(t, "status = 2") == len(all) })
	sigterm(t, java)

	// Python: everything again, and new events.
	second := round("SN-4", "SN-5")
	w.resend(t)
	w.write(t, second...)
	all = append(all, second...)
	python := w.startRecipe(t, consumerRecipes[1])
	waitApplied("the Python consumer", second)
	testenv.Eventually(t, 90*time.Second, "the Python consumer to skip the Java consumer's events", func() bool {
		out := python.Out.String()
		for _, ev := range first {
			if !strings.Contains(out, "duplicate "+w.identity(ev)+"\n") {
				return false
			}
		}
		return true
	})
	testenv.Eventually(t, 30*time.Second, "every row sent", func() bool { return w.e.count(t, "status = 2") == len(all) })
	sigterm(t, python)

	// Go: everything again, and new events.
	third := round("SN-6")
	w.resend(t)
	w.write(t, third...)
	all = append(all, third...)
	var received atomic.Int64
	stop := w.startGo(t, &received)
	waitApplied("the Go consumer", third)
	testenv.Eventually(t, 30*time.Second, "every row sent", func() bool { return w.e.count(t, "status = 2") == len(all) })
	testenv.Eventually(t, 90*time.Second, "the Go consumer to handle every row published again", func() bool {
		return received.Load() >= int64(len(all))
	})
	stop()

	got := w.applied(t)
	by := map[string][]string{}
	for _, ev := range all {
		id := w.identity(ev)
		if n := len(got[id]); n != 1 {
			t.Errorf("%s applied %d times (%v), want once", id, n, got[id])
		}
		by[got[id][0]] = append(by[got[id][0]], id)
	}
	for id, cs := range got {
		if len(cs) > 1 {
			t.Errorf("%s applied by %v", id, cs)
		}
	}
	for c, evs := range map[string][]event{"java": first, "python": second, "go": third} {
		for _, ev := range evs {
			if !slices.Contains(by[c], w.identity(ev)) {
				t.Errorf("%s was not applied by the %s consumer: %v", w.identity(ev), c, got[w.identity(ev)])
			}
		}
	}
	// The dedupe rows are what SQLGuard writes: group and identity, byte for byte.
	var keys []string
	rows, err := w.cdb.Query("SELECT CONCAT(consumer_group, '|', dedupe_key) FROM stock_dedupe ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	for _, ev := range all {
		if !slices.Contains(keys, w.group+"|"+w.identity(ev)) {
			t.Errorf("no dedupe row %q in %v", w.group+"|"+w.identity(ev), keys)
		}
	}
}
