// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// The deployments users run besides brokers reached directly: Apache RocketMQ 5.3.3's proxy in
// cluster mode and a broker with ACL 2.0, started once for the package by
// `scripts/rocketmq.sh deploy-start` (their own name server, so broker-a never sees them).

var (
	deployOnce sync.Once
	deployVars map[string]string
	deployErr  error
)

// deployments starts (or reuses) the deployments and returns what deploy-start printed
// (OUTBOX_TEST_ROCKETMQ_PROXY and the like). Under CI=true a failure fails the test.
func deployments(t *testing.T) map[string]string {
	t.Helper()
	testenv.RocketMQ(t)
	deployOnce.Do(func() {
		out, err := runScript("deploy-start")
		if err != nil {
			deployErr = err
			return
		}
		deployVars = map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && strings.HasPrefix(k, "OUTBOX_TEST_ROCKETMQ_") {
				deployVars[k] = strings.Trim(v, "'")
			}
		}
	})
	if deployErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("RocketMQ proxy and ACL broker unavailable: %v", deployErr)
		}
		t.Skipf("RocketMQ proxy and ACL broker unavailable: %v", deployErr)
	}
	return deployVars
}

// proxyTarget is broker-proxied reached through the 5.x proxy: the relay is given the proxy's
// remoting address as its name server; the suite creates topics on the broker and reads them
// back through the deployments' name server.
func proxyTarget(t *testing.T) *target {
	v := deployments(t)
	return &target{name: "proxy", nameServer: v["OUTBOX_TEST_ROCKETMQ_DEPLOY_NAMESRV"],
		brokerAddr: v["OUTBOX_TEST_ROCKETMQ_PROXY_BROKER"], nameServers: v["OUTBOX_TEST_ROCKETMQ_PROXY"], real: true}
}

// aclTarget is broker-acl (ACL 2.0); the suite signs its own requests as the super user.
func aclTarget(t *testing.T) *target {
	v := deployments(t)
	return &target{name: "acl", nameServer: v["OUTBOX_TEST_ROCKETMQ_DEPLOY_NAMESRV"],
		brokerAddr: v["OUTBOX_TEST_ROCKETMQ_ACL_BROKER"], real: true,
		creds: credentials(t, v["OUTBOX_TEST_ROCKETMQ_ACL_ADMIN_USER"])}
}

// credentials parses "user:password".
func credentials(t *testing.T, pair string) *primitive.Credentials {
	t.Helper()
	ak, sk, ok := strings.Cut(pair, ":")
	if !ok {
		t.Fatalf("credentials %q are not user:password", pair)
	}
	return &primitive.Credentials{AccessKey: ak, SecretKey: sk}
}

// fifoTopic creates a FIFO topic (message.type=FIFO, RocketMQ 5.x) of 4 queues on the
// target's broker.
func (b *target) fifoTopic(t *testing.T, prefix string) string {
	t.Helper()
	return b.mqadminTopic(t, prefix, "-a", "+message.type=FIFO")
}

// mqadminTopic creates a topic of 4 queues on the target's broker with mqadmin (signed as the
// ACL super user), as an operator would, with more updateTopic arguments. rocketmq-client-go's
// admin API does not read the broker's answer, so it cannot tell a refused creation.
func (b *target) mqadminTopic(t *testing.T, prefix string, args ...string) string {
	t.Helper()
	name := prefix + "_" + testenv.RandomSuffix(8)
	out, err := runScript(append([]string{"deploy-admin", "updateTopic", "-b", b.brokerAddr, "-t", name, "-r", "4", "-w", "4"}, args...)...)
	if err != nil || !strings.Contains(out, "success") {
		t.Fatalf("create topic %s: %v\n%s", name, err, out)
	}
	b.waitSendable(t, name)
	return name
}

// shapes returns n messages to topic of the shapes users write: tags, several keys, user
// properties, unicode, a body over the client's compression threshold.
func shapes(topic string, n int) []outbox.Message {
	var msgs []outbox.Message
	for i := range n {
		m := outbox.Message{MsgID: fmt.Sprintf("p-%04d", i), Topic: topic,
			Body: []byte(fmt.Sprintf(`{"orderSn":"SN%d","note":"订单 ✓"}`, i))}
		switch i % 4 {
		case 0:
			m.Tag, m.Keys = "created", []string{fmt.Sprintf("SN%d", i), "U1"}
		case 1:
			m.Tag, m.Properties = "paid", map[string]string{"tenant": "acme"}
		case 2:
			if i%20 == 2 {
				m.Body = []byte(randomText(10 << 10))
			}
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// checkDelivered checks that every message of want arrived once as written and that every row
// is marked sent.
func checkDelivered(t *testing.T, e *env, in *inbox, want []outbox.Message) {
	t.Helper()
	got := in.wait(t, len(want), 90*time.Second)
	for _, w := range want {
		m := got[w.MsgID]
		if m == nil {
			t.Errorf("%s: not consumed", w.MsgID)
			continue
		}
		if string(m.Body) != string(w.Body) || m.GetTags() != w.Tag {
			t.Errorf("%s: consumed tag %q body %.40q, want tag %q body %.40q", w.MsgID, m.GetTags(), m.Body, w.Tag, w.Body)
		}
		if n := in.copies(w.MsgID); n != 1 {
			t.Errorf("%s: consumed %d times", w.MsgID, n)
		}
	}
	testenv.Eventually(t, 30*time.Second, "every row marked sent", func() bool {
		return e.count(t, "status = 2") == len(want)
	})
}

// TestProxyDeliversEveryRow: through a 5.x proxy in cluster mode (the relay is given the
// proxy as its name server), every row is delivered once, in batches, as written.
// rocketmq-client-go v2.1.2 got `CODE: 15, DESC: Request doesn't have field bname` here.
func TestProxyDeliversEveryRow(t *testing.T) {
	b := proxyTarget(t)
	e := newEnv(t, b)
	topic := b.topic(t, "proxied")
	msgs := shapes(topic, 300)
	e.insert(t, msgs...)
	in := b.consume(t, topic)
	e.startRelay(t)
	checkDelivered(t, e, in, msgs)
}

// TestProxyFIFOMessageGroups: an ordered route to a 5.x FIFO topic through the proxy: each
// sharding key travels as the message group (__SHARDINGKEY, which the proxy requires on a
// FIFO topic) and the messages of a key are in one queue in row order; the proxy's refusal
// of batches of keyed messages pauses them for the topic (a minute, longer than the test).
func TestProxyFIFOMessageGroups(t *testing.T) {
	b := proxyTarget(t)
	e := newEnv(t, b)
	topic := b.fifoTopic(t, "fifo")
	msgs := orderedRows("f", topic, 6, 20)
	in := b.consume(t, topic)
	relay := e.startRelay(t, `OUTBOX_ROUTES=[{"topic":"`+topic+`","ordered":true}]`)
	e.insertAfterFirst(t, msgs)
	got := in.wait(t, len(msgs), 90*time.Second)
	for _, m := range got {
		if g := m.GetProperty("__SHARDINGKEY"); g != m.GetKeys() {
			t.Errorf("%s: message group %q, want %q", m.GetProperty(outbox.MsgIDProperty), g, m.GetKeys())
		}
	}
	checkKeysInQueueOrder(t, got)
	testenv.Eventually(t, 30*time.Second, "every row marked sent", func() bool {
		return e.count(t, "status = 2") == len(msgs)
	})
	// 5.3.3's proxy refuses a batch of keyed messages on a FIFO topic ("TopicMessageType
	// validate failed, the expected type is FIFO, but actual type is NORMAL": the client's
	// batch request carries none of its messages' properties). The relay pauses keyed batches
	// for the topic at the first refusal and sends the refused lanes' rows one a request:
	// at most one refused batch per queue (4) besides a request per row.
	if n := strings.Count(relay.Out.String(), "refused a batch of keyed messages"); n != 1 {
		t.Errorf("the refusal of keyed batches logged %d times, want once", n)
	}
	if n := sendRequests(t, relay); n > len(msgs)+4 {
		t.Errorf("%d send requests for %d rows: keyed batches were tried again after the proxy refused them", n, len(msgs))
	}
}

// sendRequests counts the relay's send requests (outbox_relay_publish_duration_seconds) on
// its /metrics page.
func sendRequests(t *testing.T, relay *testenv.Proc) int {
	t.Helper()
	return metricSum(t, relay, func(line string) bool {
		return strings.HasPrefix(line, "outbox_relay_publish_duration_seconds_count")
	})
}

// TestProxyNamespace: with rocketmq.namespace the relay sends a row's topic T as
// "namespace%T", the name RocketMQ gives namespaced topics, through the proxy.
func TestProxyNamespace(t *testing.T) {
	b := proxyTarget(t)
	e := newEnv(t, b)
	const ns = "tenant_a"
	full := b.topic(t, ns+"%nstopic")
	topic := strings.TrimPrefix(full, ns+"%")
	msgs := shapes(topic, 40)
	e.insert(t, msgs...)
	in := b.consume(t, full)
	e.startRelay(t, "OUTBOX_ROCKETMQ_NAMESPACE="+ns)
	checkDelivered(t, e, in, msgs)
}

// TestTLS: with rocketmq.tls.enable the relay speaks TLS: its name server is reached only
// through a TLS-terminating forwarder (a plain connection cannot pass it), and the proxy
// (permissive TLS, RocketMQ's default) takes the sends over TLS.
func TestTLS(t *testing.T) {
	b := proxyTarget(t)
	fwd := tlsForwarder(t, b.nameServers)
	b.nameServers = fwd
	e := newEnv(t, b)
	topic := b.topic(t, "tls")
	msgs := shapes(topic, 40)
	e.insert(t, msgs...)
	in := b.consume(t, topic)
	e.startRelay(t, "OUTBOX_ROCKETMQ_TLS_ENABLE=true", "OUTBOX_ROCKETMQ_TLS_INSECURE_SKIP_VERIFY=true")
	checkDelivered(t, e, in, msgs)
}

// tlsForwarder listens with TLS (a fresh self-signed certificate) on loopback and forwards
// every connection in plain TCP to target; it returns its address.
func tlsForwarder(t *testing.T, target string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return // a plain client: nothing is forwarded
				}
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestACLPublishAllowed: an ACL 2.0 user allowed to publish (rocketmq.access_key and
// secret_key) gets every row delivered.
func TestACLPublishAllowed(t *testing.T) {
	b := aclTarget(t)
	user := credentials(t, deployments(t)["OUTBOX_TEST_ROCKETMQ_ACL_USER"])
	e := newEnv(t, b)
	topic := b.mqadminTopic(t, "acl")
	msgs := shapes(topic, 100)
	e.insert(t, msgs...)
	in := b.consume(t, topic)
	e.startRelay(t, "OUTBOX_ROCKETMQ_ACCESS_KEY="+user.AccessKey, "OUTBOX_ROCKETMQ_SECRET_KEY="+user.SecretKey)
	checkDelivered(t, e, in, msgs)
}

// TestACLRefusalsAreConfigurationFaults: a user without permission, and a wrong secret key,
// are refused by the broker on every send ("CODE: 16 ... has no permission", "check
// signature failed"). That is the configuration of the topic or the credential, not a broker
// incident: the relay names the topic and the access key in a warning or error within
// seconds, marks no row sent, and its attempts die down (fewer in the second of two equal
// windows than half the first) rather than going on at one rate. A relay that judged it a
// broker incident sent ~16 a second, forever.
func TestACLRefusalsAreConfigurationFaults(t *testing.T) {
	v := deployments(t)
	for _, tc := range []struct{ name, cred, says string }{
		{"no permission", v["OUTBOX_TEST_ROCKETMQ_ACL_NOPERM_USER"], "has no permission"},
		{"wrong secret key", strings.SplitN(v["OUTBOX_TEST_ROCKETMQ_ACL_USER"], ":", 2)[0] + ":not-the-secret", "check signature failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := aclTarget(t)
			user := credentials(t, tc.cred)
			e := newEnv(t, b)
			topic := b.mqadminTopic(t, "aclrefused")
			const rows = 20
			var msgs []outbox.Message
			for i := range rows {
				msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("r-%02d", i), Topic: topic, Body: []byte("x")})
			}
			e.insert(t, msgs...)
			relay := e.startRelay(t, "OUTBOX_ROCKETMQ_ACCESS_KEY="+user.AccessKey, "OUTBOX_ROCKETMQ_SECRET_KEY="+user.SecretKey)
			testenv.Eventually(t, 10*time.Second, "an error naming the topic and the access key", func() bool {
				return loggedFault(relay.Out.String(), topic, user.AccessKey)
			})
			// Two equal observation windows (not a synchronisation): attempts must die down.
			const window = 6 * time.Second
			time.Sleep(window)
			first := failedAttempts(t, relay, topic)
			time.Sleep(window)
			second := failedAttempts(t, relay, topic) - first
			t.Logf("failed sends of %d rows: %d in the first %v, %d in the next (rows by status: %s)", rows, first, window, second, e.statuses(t))
			if second > first/2 {
				t.Errorf("%d failed sends in the second %v after %d in the first: the refusal (%s) is retried at an undiminished rate", second, window, first, tc.says)
			}
			if n := e.count(t, "status = 2"); n != 0 {
				t.Errorf("%d rows marked sent through a refusing broker", n)
			}
		})
	}
}

// loggedFault reports whether a warn or error line of a relay's JSON log names topic and ak.
func loggedFault(log, topic, ak string) bool {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var entry map[string]any
		if json.Unmarshal(sc.Bytes(), &entry) != nil {
			continue
		}
		if lvl := entry["level"]; lvl != "warn" && lvl != "error" {
			continue
		}
		if line := sc.Text(); strings.Contains(line, topic) && strings.Contains(line, ak) {
			return true
		}
	}
	return false
}

// failedAttempts sums outbox_relay_failed_total of topic on the relay's /metrics page.
func failedAttempts(t *testing.T, relay *testenv.Proc, topic string) int {
	t.Helper()
	return metricSum(t, relay, func(line string) bool {
		return strings.HasPrefix(line, "outbox_relay_failed_total{") && strings.Contains(line, `"`+topic+`"`)
	})
}

// metricSum sums the values of the lines of the relay's /metrics page that match.
func metricSum(t *testing.T, relay *testenv.Proc, match func(line string) bool) int {
	t.Helper()
	page := testenv.Metrics(testenv.LoggedHTTPAddr(relay.Out.String()))
	if page == "" {
		t.Fatal("the relay's /metrics page did not answer")
	}
	n := 0
	for _, line := range strings.Split(page, "\n") {
		if match(line) {
			f, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			n += int(f)
		}
	}
	return n
}

// statuses is the rows' count by status, e.g. "0:3 3:17".
func (e *env) statuses(t *testing.T) string {
	t.Helper()
	rows, err := e.db.Query("SELECT status, COUNT(*) FROM local_message GROUP BY status ORDER BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s, n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%d:%d", s, n))
	}
	return strings.Join(out, " ")
}

// TestProxyTopicTypeMismatchIsAConfigurationFault: through a 5.x proxy, an ordered route to a
// NORMAL topic, or an unordered route to a FIFO topic, is refused on every send ("CODE: 13,
// DESC: TopicMessageType validate failed, the expected type is FIFO, but actual type is
// NORMAL"). That is the route's configuration, not the messages': the relay says so within
// seconds, naming the topic, and holds the rows (none dead) until the route or the topic is
// fixed. (Before the one classifier, code 13 was "message illegal": every row dead at once.)
func TestProxyTopicTypeMismatchIsAConfigurationFault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		fifo    bool
		ordered bool
	}{
		{"ordered route, NORMAL topic", false, true},
		{"unordered route, FIFO topic", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := proxyTarget(t)
			e := newEnv(t, b)
			var topic string
			if tc.fifo {
				topic = b.fifoTopic(t, "mismatch")
			} else {
				topic = b.topic(t, "mismatch")
			}
			var msgs []outbox.Message
			for i := range 10 {
				msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("m-%02d", i), Topic: topic, ShardingKey: fmt.Sprintf("k%d", i%3), Body: []byte("x")})
			}
			e.insert(t, msgs...)
			relay := e.startRelay(t, fmt.Sprintf(`OUTBOX_ROUTES=[{"topic":"%s","ordered":%v}]`, topic, tc.ordered))
			testenv.Eventually(t, 10*time.Second, "a warning naming the topic and its message type", func() bool {
				return loggedFault(relay.Out.String(), topic, "FIFO")
			})
			if n := e.count(t, "status = 3"); n != 0 {
				t.Errorf("%d of %d rows dead for a route/topic mismatch; want them held (rows by status: %s)", n, len(msgs), e.statuses(t))
			}
		})
	}
}

// TestProxyMissingTopic: a topic that does not exist behind a proxy is a missing topic (its
// rows retried on their schedule, then dead with the reason), not an unreachable cluster: the
// proxy answers routes but not the name servers' broker list the relay asks for.
func TestProxyMissingTopic(t *testing.T) {
	b := proxyTarget(t)
	e := newEnv(t, b)
	topic := "absent_" + testenv.RandomSuffix(8)
	var msgs []outbox.Message
	for i := range 3 {
		msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("a-%d", i), Topic: topic, Body: []byte("x")})
	}
	e.insert(t, msgs...)
	e.startRelay(t)
	testenv.Eventually(t, 60*time.Second, "every row of the missing topic dead", func() bool {
		return e.count(t, "status = 3") == len(msgs)
	})
	var reason string
	if err := e.db.QueryRow("SELECT fail_reason FROM local_message WHERE msg_id = 'a-0'").Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "route info not found") || strings.Contains(reason, "unreachable") {
		t.Errorf("fail_reason %q, want the missing route, not an unreachable cluster", reason)
	}
}
