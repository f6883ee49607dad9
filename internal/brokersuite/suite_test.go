// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/schema"
)

var binary string // the outbox-relay binary built by TestMain

// script is scripts/rocketmq.sh, which starts, kills and configures the fault broker.
var script = filepath.Join("..", "..", "scripts", "rocketmq.sh")

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	bin, cleanup, err := testenv.BuildRelay()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	if faultStarted {
		_ = exec.Command("bash", script, "broker-stop", faultBrokerName).Run()
	}
	cleanup()
	os.Exit(code)
}

// target is one broker the suite runs against.
type target struct {
	name       string
	nameServer string
	// brokerAddr is where the test's topics are created (rocketmq-client-go's admin API).
	brokerAddr string
	// nameServers is what the relay is given (comma-separated); empty: nameServer.
	nameServers string
	// peer is another broker of the same cluster (empty: none).
	peer string
	// real is true for Apache RocketMQ.
	real bool
	// kill stops the broker hard (kill -9); start brings it back on the same store.
	kill, start func(t *testing.T)
	// setConfig changes a broker setting live, as mqadmin updateBrokerConfig does.
	setConfig func(t *testing.T, key, value string)
	// creds signs the suite's own admin, probe and consumer requests (an ACL 2.0 broker).
	creds *primitive.Credentials
}

// each runs fn once per broker. fault says fn changes the broker (kills it, changes its
// settings): on RocketMQ it then gets the fault broker, and such tests run one at a time.
func each(t *testing.T, fault bool, fn func(t *testing.T, b *target)) {
	t.Run("rmqtest", func(t *testing.T) {
		if !fault {
			t.Parallel()
		}
		fn(t, rmqtestTarget(t))
	})
	t.Run("rocketmq", func(t *testing.T) {
		if !fault {
			t.Parallel()
			fn(t, &target{name: "rocketmq", nameServer: testenv.RocketMQ(t), brokerAddr: testenv.RocketMQBroker(), real: true})
			return
		}
		fn(t, faultTarget(t))
	})
}

func rmqtestTarget(t *testing.T) *target {
	// Transaction check timing as scripts/rocketmq.sh configures the real brokers.
	srv, err := rmqtest.Start(rmqtest.Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {},
		TransactionTimeout: time.Second, TransactionCheckInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &target{
		name: "rmqtest", nameServer: srv.NameServerAddr(), brokerAddr: srv.BrokerAddr(),
		kill: func(*testing.T) { srv.StopBroker() },
		start: func(t *testing.T) {
			if err := srv.StartBroker(); err != nil {
				t.Fatal(err)
			}
		},
		setConfig: func(t *testing.T, key, value string) {
			var n int
			if _, err := fmt.Sscan(value, &n); err != nil {
				t.Fatalf("setConfig %s=%q: %v", key, value, err)
			}
			switch key {
			case "brokerPermission":
				srv.SetBrokerPermission(n)
			case "maxMessageSize":
				srv.SetMaxMessageSize(n)
			default:
				t.Fatalf("rmqtest has no setting %s", key)
			}
		},
	}
}

const faultBrokerName = "broker-fault"

var (
	faultOnce    sync.Once
	faultErr     error
	faultStarted bool
)

// faultPort is the fault broker's port (it also takes port-2 and port+1).
func faultPort() string {
	if v := os.Getenv("OUTBOX_TEST_ROCKETMQ_FAULT_PORT"); v != "" {
		return v
	}
	return "19921"
}

// runScript runs scripts/rocketmq.sh and returns its combined output.
func runScript(args ...string) (string, error) {
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rocketmq.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// faultBroker starts the fault broker once for the package and returns the name server's
// and the broker's addresses.
func faultBroker(t *testing.T) (nameServer, addr string) {
	ns := testenv.RocketMQ(t)
	faultOnce.Do(func() {
		_, faultErr = runScript("broker-start", faultBrokerName, faultPort())
		faultStarted = faultErr == nil
	})
	if faultErr != nil {
		t.Fatal(faultErr)
	}
	return ns, "127.0.0.1:" + faultPort()
}

// faultTarget is the second real broker, started once for the package on the name server of
// scripts/rocketmq.sh, so faults never reach broker-a. Its settings are put back after each test.
func faultTarget(t *testing.T) *target {
	ns, addr := faultBroker(t)
	b := &target{
		name: "rocketmq", nameServer: ns, brokerAddr: addr, real: true,
		kill: func(t *testing.T) {
			if _, err := runScript("broker-kill", faultBrokerName); err != nil {
				t.Fatal(err)
			}
		},
		start: func(t *testing.T) {
			if _, err := runScript("broker-start", faultBrokerName, faultPort()); err != nil {
				t.Fatal(err)
			}
		},
		setConfig: func(t *testing.T, key, value string) {
			out, err := runScript("admin", "updateBrokerConfig", "-b", addr, "-k", key, "-v", value)
			if err != nil || !strings.Contains(out, "update broker config success") {
				t.Fatalf("updateBrokerConfig %s=%s: %v\n%s", key, value, err, out)
			}
		},
	}
	t.Cleanup(func() {
		// A killed broker is started again; the settings go back to the script's.
		b.start(t)
		b.setConfig(t, "brokerPermission", "6")
		b.setConfig(t, "maxMessageSize", "4194304")
	})
	return b
}

// topic creates a topic of 4 queues with a name unique to the test.
func (b *target) topic(t testing.TB, prefix string) string {
	t.Helper()
	return b.createTopic(t, prefix, b.brokerAddr)
}

// createTopic creates a topic of 4 queues on each of brokers (updateTopic per broker), named
// prefix and a random suffix.
func (b *target) createTopic(t testing.TB, prefix string, brokers ...string) string {
	t.Helper()
	name := prefix + "_" + testenv.RandomSuffix(8)
	aopts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver([]string{b.nameServer}))}
	if b.creds != nil {
		aopts = append(aopts, admin.WithCredentials(*b.creds))
	}
	adm, err := admin.NewAdmin(aopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, addr := range brokers {
		if err := adm.CreateTopic(ctx, admin.WithTopicCreate(name), admin.WithBrokerAddrCreate(addr),
			admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
			t.Fatalf("create topic %s on %s: %v", name, addr, err)
		}
	}
	// The broker registers the new topic with the name server as it creates it; wait until a
	// producer gets a route, so that the test measures the relay, not route propagation.
	b.waitSendable(t, name)
	return name
}

// waitSendable polls until a fresh producer can send to topic; the probe message carries no
// OUTBOX_MSG_ID, so readers ignore it.
func (b *target) waitSendable(t testing.TB, topic string) {
	t.Helper()
	var last error
	testenv.Eventually(t, 30*time.Second, "a route to "+topic, func() bool {
		last = b.probe(topic)
		return last == nil
	})
}

// probe sends one message with a new producer and returns the client's error.
func (b *target) probe(topic string) error {
	opts := []producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
		producer.WithRetry(0),
		producer.WithGroupName("probe"),
		producer.WithInstanceName("probe-" + testenv.RandomSuffix(8)),
	}
	if b.creds != nil {
		opts = append(opts, producer.WithCredentials(*b.creds))
	}
	p, err := rocketmq.NewProducer(opts...)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = p.SendSync(ctx, primitive.NewMessage(topic, []byte("probe")).WithKeys([]string{"probe"}).WithTag("probe"))
	return err
}

// env is one test's world: a database with the outbox table, a Redis prefix, a broker.
type env struct {
	b      *target
	db     *testenv.DB
	prefix string
	writer *outbox.Writer
}

func newEnv(t testing.TB, b *target) *env {
	t.Helper()
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(rdb)})
	if err != nil {
		t.Fatal(err)
	}
	return &env{b: b, db: db, prefix: prefix, writer: w}
}

func (e *env) insert(t testing.TB, msgs ...outbox.Message) {
	t.Helper()
	if err := e.writer.InsertNoTx(context.Background(), e.db.DB, msgs); err != nil {
		t.Fatal(err)
	}
	if err := e.writer.Nudge(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (e *env) count(t testing.TB, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM local_message WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startRelay starts `outbox-relay run` on the test's database and broker, with extra OUTBOX_
// variables.
func (e *env) startRelay(t testing.TB, extra ...string) *testenv.Proc {
	t.Helper()
	ns := e.b.nameServers
	if ns == "" {
		ns = e.b.nameServer
	}
	env := append(os.Environ(),
		"OUTBOX_MYSQL_DSN="+e.db.DSN,
		"OUTBOX_REDIS_ADDR="+testenv.RedisAddr(),
		"OUTBOX_ROCKETMQ_NAMESERVERS="+ns,
		"OUTBOX_LOCK_KEY="+e.prefix+"lock:{table}",
		"OUTBOX_LOCK_TTL=2s",
		"OUTBOX_RELAY_POLL_INTERVAL=100ms",
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT=5s",
		"OUTBOX_BACKOFF_BASE=100ms",
		"OUTBOX_BACKOFF_MAX=2s",
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_LOG_FORMAT=json",
		"OUTBOX_LOG_LEVEL=info",
	)
	return testenv.StartProc(t, append(env, extra...), binary, "run")
}

// tail returns the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// inbox collects what a push consumer of its own group receives, by OUTBOX_MSG_ID.
type inbox struct {
	mu   sync.Mutex
	byID map[string][]*primitive.MessageExt
	all  int
}

// consume subscribes a push consumer (a new group, from the first offset) to topic.
func (b *target) consume(t testing.TB, topic string) *inbox {
	t.Helper()
	in := &inbox{byID: map[string][]*primitive.MessageExt{}}
	b.pushConsumer(t, topic, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		in.mu.Lock()
		defer in.mu.Unlock()
		for _, m := range msgs {
			if id := m.GetProperty(outbox.MsgIDProperty); id != "" {
				in.byID[id] = append(in.byID[id], m)
				in.all++
			}
		}
		return consumer.ConsumeSuccess, nil
	}, consumer.WithConsumeMessageBatchMaxSize(32))
	return in
}

// pushConsumer starts a push consumer of a new group on topic, reading from the first offset.
func (b *target) pushConsumer(t testing.TB, topic string, fn func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error), opts ...consumer.Option) {
	t.Helper()
	group := "suite_" + testenv.RandomSuffix(8)
	c, err := rocketmq.NewPushConsumer(append([]consumer.Option{
		consumer.WithGroupName(group),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithInstance(group),
	}, append(b.consumerCreds(), opts...)...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, fn); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
}

// wait polls until n distinct messages arrived and returns them, one per id (the first).
func (in *inbox) wait(t testing.TB, n int, within time.Duration) map[string]*primitive.MessageExt {
	t.Helper()
	testenv.Eventually(t, within, fmt.Sprintf("%d distinct messages consumed", n), func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return len(in.byID) >= n
	})
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]*primitive.MessageExt, len(in.byID))
	for id, ms := range in.byID {
		out[id] = ms[0]
	}
	return out
}

// copies returns how many deliveries of id arrived.
func (in *inbox) copies(id string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.byID[id])
}

// consumerCreds is the consumer option signing with the target's credentials, if any.
func (b *target) consumerCreds() []consumer.Option {
	if b.creds == nil {
		return nil
	}
	return []consumer.Option{consumer.WithCredentials(*b.creds)}
}
