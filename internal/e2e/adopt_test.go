// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/redisnudge"
)

// Row 15 of issue 26: a row marked is_deleted = 1 (the runbook's "never send") counted as
// pending in `status` and in outbox_relay_pending, so a backlog alert could fire on rows
// nobody will ever send. The binary's gauge and its status command leave them out.
func TestDeletedRowsAreNotBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// Three rows waiting for their first attempt (next hour), two of them pending and marked
	// deleted, one failed and deleted, one dead and deleted.
	later := time.Now().Add(time.Hour).UnixMilli()
	if _, err := e.db.Exec(`INSERT INTO local_message (msg_id, topic, content, status, is_deleted, next_retry_time) VALUES
		('wait-1', 'orders', '{}', 0, 0, ?), ('wait-2', 'orders', '{}', 0, 0, ?), ('wait-3', 'orders', '{}', 1, 0, ?),
		('del-1', 'orders', '{}', 0, 1, 0), ('del-2', 'orders', '{}', 0, 1, ?), ('del-3', 'orders', '{}', 1, 1, 0),
		('del-4', 'orders', '{}', 3, 1, 0)`, later, later, later, later); err != nil {
		t.Fatal(err)
	}
	p := e.startRelay(t)
	pending := regexp.MustCompile(`(?m)^outbox_relay_pending\{[^}]*table="local_message"[^}]*\} (\S+)$`)
	var got string
	// Before its first sample the gauge reads 0.
	eventually(t, 15*time.Second, "outbox_relay_pending to be sampled", func() bool {
		m := pending.FindStringSubmatch(metricsOf(p))
		if m != nil {
			got = m[1]
		}
		return m != nil && got != "0"
	})
	if got != "3" {
		t.Fatalf("outbox_relay_pending = %s, want 3 (the deleted rows are not backlog)", got)
	}
	out := e.cli(t, "status")
	for _, want := range []string{"pending      2", "failed       1", "dead         0", "deleted, never sent  4"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if n := e.count(t, "is_deleted = 1 AND status <> 2"); n != 4 {
		t.Fatalf("a deleted row changed status: %d of 4 left unsent", n)
	}
}

// lockWaitOf returns outbox_relay_lock_wait_seconds of p for local_message, and its labels;
// -1 before p exports it.
func lockWaitOf(p *proc) (float64, string) {
	m := lockWaitRE.FindStringSubmatch(metricsOf(p))
	if m == nil {
		return -1, ""
	}
	v, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return -1, ""
	}
	return v, m[1]
}

var lockWaitRE = regexp.MustCompile(`(?m)^outbox_relay_lock_wait_seconds\{([^}]*table="local_message"[^}]*)\} (\S+)$`)

// Rows 9 and 17 of issue 26: outbox_relay_lock_wait_seconds stayed 0 on a standby (it was set
// only outside a relay group, and the binary always runs one), so OutboxRelayLockWaitLong
// could never fire; and a healthy standby logged at warn every 6, 12, 24 s. The standby
// binary exports its wait, the leader 0, and the standby's log has no warning.
func TestStandbyExportsItsLockWaitQuietly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.leading(t, "relay-a")
	b := e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-b")
	// 3 lock TTLs is when the standby used to log its first warning; the gauge is sampled
	// every 5 s.
	eventually(t, 30*time.Second, "the standby to export a lock wait past 3 lock TTLs", func() bool {
		w, _ := lockWaitOf(b)
		return w >= (3*lockTTL + time.Second).Seconds()
	})
	if w, _ := lockWaitOf(a); w != 0 {
		t.Fatalf("the leader exports a lock wait of %gs, want 0", w)
	}
	for _, line := range jsonLogLines(b.Out.String()) {
		if line["level"] == "warn" || line["level"] == "error" {
			t.Errorf("a healthy standby logged at %s: %v", line["level"], line)
		}
	}
}

// jsonLogLines decodes the JSON log lines of s, skipping anything else.
func jsonLogLines(s string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m != nil {
			out = append(out, m)
		}
	}
	return out
}

// Row 9 of issue 26, with the shipped alert: when a process outside the group holds the
// table's lock (a zombie, or another service using the same lock.key), every relay's gauge
// grows, and deploy/prometheus/alerts.yml's OutboxRelayLockWaitLong fires on the series as
// the binaries label them.
func TestLockWaitAlertFiresWhenNoRelayHoldsTheLock(t *testing.T) {
	t.Parallel()
	promtool := promtoolPath(t)
	e := newEnv(t)
	rdb, _ := testenv.Redis(t)
	key := e.prefix + "lock:local_message"
	if err := rdb.Set(context.Background(), key, "host=elsewhere pid=1 since=1 token=00", 10*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	a := e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-a")
	b := e.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-b")
	var labels [2]string
	var waits [2]float64
	eventually(t, 30*time.Second, "both relays to export a lock wait", func() bool {
		waits[0], labels[0] = lockWaitOf(a)
		waits[1], labels[1] = lockWaitOf(b)
		return waits[0] > 1 && waits[1] > 1
	})
	// Prometheus scrapes each relay once a minute; from here each gauge goes on growing by
	// 60 s per minute, as it did between the scrapes above.
	var series []map[string]string
	for i, l := range labels {
		series = append(series, map[string]string{
			"series": fmt.Sprintf(`outbox_relay_lock_wait_seconds{job="outbox-relay",instance="%c",%s}`, 'a'+i, l),
			"values": fmt.Sprintf("%g+60x5", waits[i]),
		})
	}
	db, table := labelValue(labels[0], "database"), labelValue(labels[0], "table")
	doc := map[string]any{
		"rule_files":          []string{filepath.Join(repoRoot(t), "deploy/prometheus/alerts.yml")},
		"evaluation_interval": "1m",
		"tests": []map[string]any{{
			"interval":     "1m",
			"input_series": series,
			"alert_rule_test": []map[string]any{
				{"eval_time": "0m", "alertname": "OutboxRelayLockWaitLong", "exp_alerts": []any{}},
				{"eval_time": "3m", "alertname": "OutboxRelayLockWaitLong", "exp_alerts": []map[string]any{{
					"exp_labels": map[string]string{"severity": "page", "database": db, "table": table},
					"exp_annotations": map[string]string{
						"summary":     "every relay of table " + table + " of " + db + " has waited over a minute for its lock",
						"runbook_url": "docs/runbook.md#no-leader-lock-held-by-a-dead-process",
					},
				}}},
			},
		}},
	}
	raw, err := json.Marshal(doc) // JSON is YAML
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "lockwait_test.yml")
	if err := os.WriteFile(file, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Fatalf("OutboxRelayLockWaitLong on the relays' series: %v\n%s\n%s", err, out, raw)
	}
}

func labelValue(labels, name string) string {
	m := regexp.MustCompile(name + `="([^"]*)"`).FindStringSubmatch(labels)
	if m == nil {
		return ""
	}
	return m[1]
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// promtoolPath returns the promtool that scripts/promtool.sh runs (fetching it from
// Debian's package when missing); without one the test is skipped, or fails under CI=true.
func promtoolPath(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(repoRoot(t), "scripts/promtool.sh"), "--path").Output()
	if err != nil {
		testenv.Unavailable(t, "promtool (scripts/promtool.sh)", err)
	}
	return strings.TrimSpace(string(out))
}

// Row 16 of issue 26: the nudge channel had no database part, so two services with a
// local_message table on one Redis woke each other's relays. Each relay listens on its own
// database's channel (and, for writers of earlier versions, on the old one), and a writer
// that names its database reaches its relay alone.
func TestNudgeChannelNamesTheDatabase(t *testing.T) {
	t.Parallel()
	a, b := newEnv(t), newEnv(t)
	a.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-a")
	b.startRelay(t, "OUTBOX_ROCKETMQ_GROUP=relay-b")
	rdb, _ := testenv.Redis(t)
	ctx := context.Background()
	labelA := outbox.DatabaseLabel(a.db.DSN)
	chA := outbox.NudgeChannelIn(labelA, "local_message")
	if want := "outbox-relay:nudge:" + labelA + ":local_message"; chA != want {
		t.Fatalf("NudgeChannelIn = %q, want %q (the documented form)", chA, want)
	}
	eventually(t, 30*time.Second, "both relays to subscribe", func() bool {
		n, err := rdb.PubSubNumSub(ctx, chA, outbox.NudgeChannelIn(outbox.DatabaseLabel(b.db.DSN), "local_message")).Result()
		return err == nil && n[chA] == 1 && n[outbox.NudgeChannelIn(outbox.DatabaseLabel(b.db.DSN), "local_message")] == 1
	})
	// A PUBLISH answers how many subscribers received it: relay a alone.
	if n, err := rdb.Publish(ctx, chA, "1").Result(); err != nil || n != 1 {
		t.Fatalf("PUBLISH on database a's channel reached %d relays (%v), want 1", n, err)
	}
	// The old channel still wakes both, so that writers of earlier versions keep working.
	if n, err := rdb.Publish(ctx, outbox.NudgeChannel("local_message"), "1").Result(); err != nil || n < 2 {
		t.Fatalf("PUBLISH on the old channel reached %d relays (%v), want both", n, err)
	}
	// The Go writer's nudge through redisnudge.In reaches relay a, which delivers.
	w, err := outbox.NewWriter(outbox.Config{Nudger: redisnudge.New(rdb).In(labelA)})
	if err != nil {
		t.Fatal(err)
	}
	msg := outbox.Message{Topic: "orders", Keys: []string{"SN-1"}, Body: []byte("{}")}
	if err := w.InsertNoTx(ctx, a.db.DB, []outbox.Message{msg}); err != nil {
		t.Fatal(err)
	}
	if err := w.Nudge(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "relay a to deliver the nudged row", func() bool { return a.count(t, "status = 2") == 1 })
}

// readmeACL returns the arguments of README.md's redis-acl ACL SETUSER line for user, with
// password instead of CHANGE-ME.
func readmeACL(t *testing.T, user, password string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("<!-- redis-acl -->\n```\n(ACL SETUSER outbox-relay [^\n]+)\n```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no redis-acl block")
	}
	var args []any
	for i, f := range strings.Fields(string(m[1])) {
		switch {
		case i == 2:
			f = user
		case f == ">CHANGE-ME":
			f = ">" + password
		}
		args = append(args, f)
	}
	return args
}

// aclUser creates a Redis ACL user with setuser's arguments (ACL SETUSER ...), deletes it at
// cleanup, and returns the OUTBOX_ variables that make the relay log in as it.
func aclUser(t *testing.T, setuser []any) []string {
	t.Helper()
	rdb, _ := testenv.Redis(t)
	ctx := context.Background()
	if err := rdb.Do(ctx, setuser...).Err(); err != nil {
		t.Fatalf("%v: %v", setuser, err)
	}
	user := setuser[2].(string)
	t.Cleanup(func() { rdb.Do(context.Background(), "ACL", "DELUSER", user) })
	var password string
	for _, a := range setuser {
		if s, _ := a.(string); strings.HasPrefix(s, ">") {
			password = s[1:]
		}
	}
	return []string{"OUTBOX_REDIS_USERNAME=" + user, "OUTBOX_REDIS_PASSWORD=" + password}
}

// deniedTo returns the commands Redis's ACL LOG recorded as refused to user.
func deniedTo(t *testing.T, user string) []string {
	t.Helper()
	rdb, _ := testenv.Redis(t)
	entries, err := rdb.Do(context.Background(), "ACL", "LOG", "128").Slice()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		fields, _ := e.([]any)
		m := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			v, _ := fields[i+1].(string)
			m[k] = v
		}
		if m["username"] == user {
			out = append(out, m["object"])
		}
	}
	return out
}

// Row 8 of issue 26: a Redis ACL user with the commands the README listed never led (the
// group's membership script needs TIME, ZADD, ...), while /readyz said 200 "held by another
// relay of the group" though none existed. The README's ACL line, as written, is enough for
// the relay and its status command; with too few commands /readyz says what is wrong.
func TestRedisACLUserOfTheREADME(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	unique := strings.ToLower(testenv.RandomSuffix(8))
	user := "outbox-relay-test-" + unique
	lockKey := "OUTBOX_LOCK_KEY=outbox-relay:lock:test-" + unique + ":{table}"
	rdb, _ := testenv.Redis(t)
	t.Cleanup(func() {
		ctx := context.Background()
		for _, k := range rdb.Keys(ctx, "outbox-relay:lock:test-"+unique+":*").Val() {
			rdb.Del(ctx, k)
		}
	})
	creds := aclUser(t, readmeACL(t, user, "pw-"+unique))
	env := append(e.environ(append(creds, lockKey)...), "OUTBOX_ROCKETMQ_GROUP=acl")
	p := startWith(t, env)
	e.insertN(t, "acl", 3)
	eventually(t, 30*time.Second, "the relay logged in as the README's ACL user to deliver", func() bool {
		return e.count(t, "status = 2") == 3
	})
	if body, code := httpGet(p, "/readyz"); code != 200 || !strings.Contains(body, "local_message: leader") {
		t.Fatalf("/readyz of the leader: %d %s", code, body)
	}
	if out, code := runCLI(t, env, "status"); code != 0 || !strings.Contains(out, "held by") {
		t.Fatalf("status as the ACL user: exit %d\n%s", code, out)
	}
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err, ok := p.Wait(30 * time.Second); !ok || err != nil {
		t.Fatalf("relay after SIGTERM: %v (exited %v)", err, ok)
	}
	if n := rdb.Exists(context.Background(), "outbox-relay:lock:test-"+unique+":local_message").Val(); n != 0 {
		t.Error("the lock was not released at shutdown")
	}
	if denied := deniedTo(t, user); len(denied) > 0 {
		t.Errorf("Redis refused the README's ACL user these commands: %v", denied)
	}

	// The commands the README used to list: the relay cannot join its group and never
	// leads; /readyz says so, and claims no other holder.
	old := "outbox-relay-old-" + unique
	oldCreds := aclUser(t, []any{"ACL", "SETUSER", old, "on", ">pw-" + unique, "resetkeys", "~outbox-relay:*",
		"resetchannels", "&outbox-relay:*", "-@all", "+set", "+eval", "+evalsha", "+publish", "+subscribe", "+ping"})
	q := startWith(t, append(e.environ(append(oldCreds, lockKey)...), "OUTBOX_ROCKETMQ_GROUP=acl-old"))
	var body string
	eventually(t, 30*time.Second, "/readyz to say why the relay cannot lead", func() bool {
		var code int
		body, code = httpGet(q, "/readyz")
		return code == 503 && strings.Contains(body, "group membership not renewed")
	})
	if strings.Contains(body, "held by another relay") || !strings.Contains(body, "NOPERM") && !strings.Contains(body, "can't run this command") {
		t.Fatalf("/readyz with too few ACL commands:\n%s", body)
	}
}
