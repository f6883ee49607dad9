// SPDX-License-Identifier: Apache-2.0

package brokeraudit_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
)

// Apache RocketMQ 5.3.3 through scripts/rocketmq.sh: a broker of this package's own
// (broker-audit, on the shared name server, never broker-a) that loses its store, and the
// shared deployments' 5.x proxy.

var script = filepath.Join("..", "..", "scripts", "rocketmq.sh")

const auditBroker = "broker-audit"

// auditPort is broker-audit's port (it also takes port-2 and port+1).
func auditPort() string {
	if v := os.Getenv("OUTBOX_TEST_ROCKETMQ_AUDIT_PORT"); v != "" {
		return v
	}
	return "19941"
}

func runScript(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("rocketmq.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// createTopic creates topic (4 queues) on the broker at addr through the name server ns and
// waits until the name server routes it to broker.
func createTopic(t *testing.T, ns, addr, broker, topic string, creds *primitive.Credentials) {
	t.Helper()
	opts := []admin.AdminOption{admin.WithResolver(primitive.NewPassthroughResolver([]string{ns}))}
	if creds != nil {
		opts = append(opts, admin.WithCredentials(*creds))
	}
	adm, err := admin.NewAdmin(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(addr),
		admin.WithReadQueueNums(4), admin.WithWriteQueueNums(4)); err != nil {
		t.Fatalf("create topic %s on %s: %v", topic, addr, err)
	}
	waitRouted(t, ns, broker, addr, topic)
}

// startOwnBroker starts the test's own broker name on port (scripts/rocketmq.sh, on the
// shared name server), stopped when the test ends, and creates a topic named prefix plus a
// random suffix on it; it returns the name server, the broker's address and the topic.
func startOwnBroker(t *testing.T, name, port, prefix string) (ns, addr, topic string) {
	t.Helper()
	ns = testenv.RocketMQ(t)
	addr = "127.0.0.1:" + port
	runScript(t, "broker-start", name, port)
	t.Cleanup(func() { runScript(t, "broker-stop", name) })
	topic = prefix + testenv.RandomSuffix(8)
	createTopic(t, ns, addr, name, topic, nil)
	return ns, addr, topic
}

// TestRocketMQStoreLost: on Apache RocketMQ 5.3.3, every message a broker acknowledged,
// singly or in batches (each at the batch's first offset plus its index), is Present; while the broker is down (kill -9) each is Unknown; once it is back with its store
// lost (removed while it was down) and its topic created again, each is Missing.
func TestRocketMQStoreLost(t *testing.T) {
	ns, addr, topic := startOwnBroker(t, auditBroker, auditPort(), "audit_lost_")
	ps := append(send(t, ns, topic, 40), sendBatches(t, ns, topic, 30, 10)...)
	if ps[len(ps)-1].OffsetMsgID == "" {
		t.Fatal("a batch's send result has no offset message id per message")
	}
	l := lookup(ns)
	expect(t, ps, check(t, l, ps), always(brokeraudit.Present))

	runScript(t, "broker-kill", auditBroker)
	expect(t, ps, check(t, l, ps), always(brokeraudit.Unknown))

	runScript(t, "broker-wipe", auditBroker)
	runScript(t, "broker-start", auditBroker, auditPort())
	createTopic(t, ns, addr, auditBroker, topic, nil)
	fs := check(t, l, ps)
	expect(t, ps, fs, always(brokeraudit.Missing))
	reasonsSay(t, ps, fs, brokeraudit.Missing, "ends at offset 0")
}

// TestRocketMQRestoredFromOlderCopy: a 5.3.3 broker whose store is replaced, while it is
// down, by an older copy (a replica that lacks the tail, same name and address): the
// messages acknowledged after the copy are Missing, those before it Present, and messages
// sent after the restart, at the lost ones' offsets, Present.
func TestRocketMQRestoredFromOlderCopy(t *testing.T) {
	ns := testenv.RocketMQ(t)
	addr := "127.0.0.1:" + auditPort()
	runScript(t, "broker-start", auditBroker, auditPort())
	t.Cleanup(func() { runScript(t, "broker-stop", auditBroker) })
	topic := "audit_copy_" + testenv.RandomSuffix(8)
	createTopic(t, ns, addr, auditBroker, topic, nil)
	kept := send(t, ns, topic, 16)
	runScript(t, "broker-stop", auditBroker) // flushed: the copy holds every message so far
	runScript(t, "broker-store", auditBroker, "save")
	runScript(t, "broker-start", auditBroker, auditPort())
	waitRouted(t, ns, auditBroker, addr, topic)
	lost := send(t, ns, topic, 16)
	runScript(t, "broker-kill", auditBroker)
	runScript(t, "broker-store", auditBroker, "restore")
	runScript(t, "broker-start", auditBroker, auditPort())
	waitRouted(t, ns, auditBroker, addr, topic)
	later := send(t, ns, topic, 8) // at offsets the lost ones had
	all := append(append(append([]brokeraudit.Position(nil), kept...), lost...), later...)
	expectLost(t, ns, all, lost)
}

// waitRouted waits until the name server routes topic to broker at addr.
func waitRouted(t *testing.T, ns, broker, addr, topic string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, "a route of "+topic+" to "+broker, func() bool {
		rt, err := remoting.TopicRoute(context.Background(), ns, topic)
		return err == nil && rt.Masters[broker] == addr
	})
}

var (
	deployOnce sync.Once
	deployVars map[string]string
)

// deployments starts (or reuses) the shared deployments (scripts/rocketmq.sh deploy-start)
// and returns what it printed.
func deployments(t *testing.T) map[string]string {
	t.Helper()
	testenv.RocketMQ(t)
	deployOnce.Do(func() {
		out := runScript(t, "deploy-start")
		deployVars = map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "OUTBOX_TEST_ROCKETMQ_") {
				deployVars[k] = strings.Trim(v, "'")
			}
		}
	})
	if deployVars == nil {
		t.Fatal("deploy-start failed earlier")
	}
	return deployVars
}

// TestRocketMQThroughProxy: the 5.3.3 proxy (cluster mode) forwards pulls that name their
// broker, so the lookup works through it: Probe passes, sent messages are Present, a
// position past the queue's end or holding another message is Missing.
func TestRocketMQThroughProxy(t *testing.T) {
	v := deployments(t)
	proxy, broker := v["OUTBOX_TEST_ROCKETMQ_PROXY"], v["OUTBOX_TEST_ROCKETMQ_PROXY_BROKER"]
	topic := "audit_proxy_" + testenv.RandomSuffix(8)
	createTopic(t, v["OUTBOX_TEST_ROCKETMQ_DEPLOY_NAMESRV"], broker, "broker-proxied", topic, nil)
	l := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{proxy}, ProbeTopics: []string{topic}})
	if err := l.Probe(context.Background()); err != nil {
		t.Fatalf("Probe through the proxy: %v", err)
	}
	ps := send(t, proxy, topic, 12)
	expect(t, ps, check(t, l, ps), always(brokeraudit.Present))
	past, swapped := ps[0], ps[1]
	past.Offset += 1000
	swapped.MsgID = ps[2].MsgID
	fs := check(t, l, []brokeraudit.Position{past, swapped})
	expect(t, []brokeraudit.Position{past, swapped}, fs, always(brokeraudit.Missing))
	if !strings.Contains(fs[1].Reason, "another message") {
		t.Errorf("reason %q", fs[1].Reason)
	}

	// SELF_TEST_TOPIC's route through the proxy names every broker behind it, broker-acl too,
	// which refuses an unsigned pull: Probe says which and why.
	err := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{proxy}}).Probe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "broker broker-acl") || strings.Contains(err.Error(), "broker broker-proxied") {
		t.Fatalf("Probe of every broker behind the proxy = %v", err)
	}
	t.Log(err)
}

// TestRocketMQProbeACL: on a broker with ACL 2.0, a user allowed only to publish cannot run
// the audit and Probe says what it lacks; the super user can.
func TestRocketMQProbeACL(t *testing.T) {
	v := deployments(t)
	probe := func(user string) error {
		ak, sk, _ := strings.Cut(user, ":")
		return brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{
			NameServers: []string{v["OUTBOX_TEST_ROCKETMQ_DEPLOY_NAMESRV"]}, ProbeTopics: []string{"AclCluster"},
			Credentials: remoting.Credentials{AccessKey: ak, SecretKey: sk},
		}).Probe(context.Background())
	}
	err := probe(v["OUTBOX_TEST_ROCKETMQ_ACL_USER"])
	if err == nil || !strings.Contains(err.Error(), "needs to read (Sub)") {
		t.Fatalf("Probe as a publisher = %v", err)
	}
	t.Log(err)
	if err := probe(v["OUTBOX_TEST_ROCKETMQ_ACL_ADMIN_USER"]); err != nil {
		t.Fatalf("Probe as the super user: %v", err)
	}
}
