// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
	"github.com/outbox-relay/outbox-relay/schema"
)

var binary string // the outbox-relay binary built by TestMain

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	bin, cleanup, err := testenv.BuildRelay()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// env is one test's world: a database with the outbox table, a Redis prefix, a broker.
type env struct {
	db     *testenv.DB
	prefix string
	broker *rmqtest.Server
	writer *outbox.Writer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := testenv.MySQL(t)
	if err := schema.Migrate(context.Background(), db.DB, "local_message"); err != nil {
		t.Fatal(err)
	}
	rdb, prefix := testenv.Redis(t)
	// A message a consumer sends back is redelivered after a second, not at once: RocketMQ
	// waits 10 s and more (delay levels). At once, a redelivered copy of a lost ack, which the
	// relay now sends again within milliseconds, came back up to 16 times while the first copy
	// was still being consumed, and went to the dead-letter queue unhandled.
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}, RetryDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(rdb)})
	if err != nil {
		t.Fatal(err)
	}
	return &env{db: db, prefix: prefix, broker: broker, writer: w}
}

// proc is a running relay process.
type proc struct{ *testenv.Proc }

// environ is the process environment pointing the binary at the test's servers.
func (e *env) environ(extra ...string) []string {
	env := append(os.Environ(),
		"OUTBOX_MYSQL_DSN="+e.db.DSN,
		"OUTBOX_REDIS_ADDR="+testenv.RedisAddr(),
		"OUTBOX_ROCKETMQ_NAMESERVERS="+e.broker.NameServerAddr(),
		"OUTBOX_ROCKETMQ_SEND_TIMEOUT=1s",
		"OUTBOX_LOCK_KEY="+e.prefix+"lock:{table}",
		"OUTBOX_LOCK_TTL=2s",
		"OUTBOX_RELAY_POLL_INTERVAL=100ms",
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT=5s",
		"OUTBOX_HTTP_ADDR=127.0.0.1:0",
		"OUTBOX_LOG_FORMAT=json",
	)
	return append(env, extra...)
}

// startRelay starts `outbox-relay run` with the test's settings plus extra OUTBOX_ variables.
func (e *env) startRelay(t *testing.T, extra ...string) *proc {
	t.Helper()
	return startWith(t, e.environ(extra...))
}

// cli runs an operator command of the binary to completion and returns its output.
func (e *env) cli(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = e.environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("outbox-relay %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (e *env) count(t *testing.T, where string, args ...any) int {
	t.Helper()
	var n int
	if err := e.db.QueryRow("SELECT COUNT(*) FROM local_message WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) insertN(t *testing.T, prefix string, n int) {
	t.Helper()
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%06d", prefix, i), Topic: "orders", Keys: []string{fmt.Sprintf("SN%d", i)},
			Body: []byte(fmt.Sprintf(`{"orderSn":"SN%d"}`, i))}
	}
	if err := e.writer.InsertNoTx(context.Background(), e.db.DB, msgs); err != nil {
		t.Fatal(err)
	}
}

func sortByCommitLog(msgs []rmqtest.Message) {
	slices.SortFunc(msgs, func(a, b rmqtest.Message) int { return cmp.Compare(a.CommitLogOffset, b.CommitLogOffset) })
}

var eventually = testenv.Eventually
