// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// rows returns n small messages of topic with ids prefix-000000...
func rows(prefix, topic string, n int) []outbox.Message {
	msgs := make([]outbox.Message, n)
	for i := range msgs {
		sn := fmt.Sprintf("SN%06d", i)
		msgs[i] = outbox.Message{MsgID: fmt.Sprintf("%s-%06d", prefix, i), Topic: topic, Keys: []string{sn},
			Body: []byte(`{"orderSn":"` + sn + `"}`)}
	}
	return msgs
}

// msgIDs returns the msg_id of the rows matching where.
func (e *env) msgIDs(t *testing.T, where string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	rs, err := e.db.Query("SELECT msg_id FROM local_message WHERE " + where)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRelayKill9MidStream: kill -9 of the relay in the middle of a backlog, a restart, and
// every row reaches the broker; only a row not yet marked sent at the kill may arrive twice.
func TestRelayKill9MidStream(t *testing.T) {
	each(t, false, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "relaykill")
		const total = 6000
		e.insert(t, rows("rk", topic, total)...)
		relay := []string{"OUTBOX_RELAY_BATCH_SIZE=200", "OUTBOX_RELAY_BATCH_SEND=false"}
		p := e.startRelay(t, relay...)
		testenv.Eventually(t, 60*time.Second, "a part of the backlog sent", func() bool { return e.count(t, "status = 2") >= 600 })
		p.Kill9(t)
		sentAtKill := e.msgIDs(t, "status = 2")
		if len(sentAtKill) == total {
			t.Fatal("the relay finished before the kill; the test proves nothing")
		}
		in := b.consume(t, topic)
		e.startRelay(t, relay...)
		testenv.Eventually(t, 120*time.Second, "every row sent after the restart", func() bool { return e.count(t, "status = 2") == total })
		got := in.wait(t, total, 120*time.Second)
		if len(got) != total {
			t.Fatalf("consumed %d distinct messages, want %d", len(got), total)
		}
		for id := range sentAtKill {
			if n := in.copies(id); n != 1 {
				t.Errorf("%s was marked sent before the kill but arrived %d times", id, n)
			}
		}
	})
}

// TestBrokerKill9AndRestart: the broker is killed with -9 while the relay streams, rows keep
// being written, the broker is started again on the same store: nothing stored before the
// kill is lost, no row goes dead, and the relay delivers the rest by itself.
func TestBrokerKill9AndRestart(t *testing.T) {
	each(t, true, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "brokerkill")
		const before, during = 3000, 300
		e.insert(t, rows("bk", topic, before)...)
		p := e.startRelay(t, "OUTBOX_RELAY_BATCH_SIZE=100", "OUTBOX_RELAY_BATCH_SEND=false")
		testenv.Eventually(t, 60*time.Second, "a part of the backlog sent", func() bool { return e.count(t, "status = 2") >= 300 })
		failures := func() int {
			return metricSum(t, p, func(line string) bool { return strings.HasPrefix(line, "outbox_relay_send_failures_total{") })
		}
		failedBefore := failures()
		b.kill(t)
		sentAtKill := e.count(t, "status = 2")
		e.insert(t, rows("bk-down", topic, during)...)
		// The relay meets the dead broker: a send fails after the kill. (Its log says so only
		// when a broker incident opens, and one may be open already.)
		testenv.Eventually(t, 30*time.Second, "the relay to meet the dead broker", func() bool {
			return failures() > failedBefore
		})
		b.start(t)
		testenv.Eventually(t, 180*time.Second, "every row sent after the broker restart", func() bool {
			return e.count(t, "status = 2") == before+during
		})
		if n := e.count(t, "status = 3"); n != 0 {
			t.Errorf("%d rows went dead through a broker restart", n)
		}
		// A consumer of a new group reads the topic from its first offset on the restarted broker.
		b.waitSendable(t, topic)
		in := b.consume(t, topic)
		got := in.wait(t, before+during, 120*time.Second)
		if len(got) != before+during {
			t.Fatalf("consumed %d distinct messages after the restart, want %d", len(got), before+during)
		}
		t.Logf("%d rows were sent before the kill; all %d consumed from the restarted broker", sentAtKill, len(got))
	})
}

// TestMissingTopic: with autoCreateTopicEnable=false, rows for a topic that does not exist
// do not stop the others (they are sent), and stay visible to an operator: failed with a
// reason naming the topic, or dead after their attempts; none is silently dropped or left
// pending without a word. alone: the missing topic's rows are the only ones due, so no send
// of the pass reaches a broker.
func TestMissingTopic(t *testing.T) {
	for _, alone := range []bool{false, true} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			each(t, false, func(t *testing.T, b *target) { missingTopic(t, b, alone) })
		})
	}
}

func missingTopic(t *testing.T, b *target, alone bool) {
	e := newEnv(t, b)
	topic := b.topic(t, "present")
	missing := "missing_" + testenv.RandomSuffix(8)
	var msgs []outbox.Message
	good := rows("ok", topic, 60)
	bad := rows("nt", missing, 6)
	for i := range bad {
		bad[i].MaxRetries = 2
	}
	if alone {
		good = nil
		msgs = bad
	}
	for i := range good {
		msgs = append(msgs, good[i])
		if i%10 == 0 {
			msgs = append(msgs, bad[i/10])
		}
	}
	e.insert(t, msgs...)
	in := b.consume(t, topic)
	p := e.startRelay(t)
	testenv.Eventually(t, 60*time.Second, "the present topic's rows sent", func() bool {
		return e.count(t, "topic = ? AND status = 2", topic) == len(good)
	})
	in.wait(t, len(good), 60*time.Second)
	var last string
	ok := func() bool {
		var visible int
		if err := e.db.QueryRow(`SELECT COUNT(*) FROM local_message WHERE topic = ? AND status IN (1, 3) AND fail_reason LIKE ?`,
			missing, "%"+missing+"%").Scan(&visible); err != nil {
			t.Fatal(err)
		}
		last = e.rowStates(t, "topic = '"+missing+"'")
		return visible == len(bad)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !ok() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if !ok() {
		t.Errorf("rows of the missing topic %s are not all failed or dead with a reason naming it; they are:\n%s", missing, last)
		t.Logf("the client's error for a missing topic: %v", b.probe(missing))
		t.Logf("relay output:\n%s", tail(p.Out.String(), 4<<10))
	}
	t.Logf("rows of the missing topic, as an operator sees them:\n%s", last)
	if n := e.count(t, "topic = ? AND status = 2", missing); n != 0 {
		t.Errorf("%d rows of the missing topic marked sent", n)
	}
}

// rowStates lists status, retry_count and fail_reason of the rows matching where.
func (e *env) rowStates(t *testing.T, where string) string {
	t.Helper()
	rs, err := e.db.Query("SELECT msg_id, status, retry_count, COALESCE(fail_reason, '') FROM local_message WHERE " + where + " ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var b strings.Builder
	for rs.Next() {
		var id, reason string
		var status, retries int
		if err := rs.Scan(&id, &status, &retries, &reason); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  %s status=%d retry_count=%d fail_reason=%q\n", id, status, retries, reason)
	}
	return b.String()
}

// TestOverMaxMessageSize: a message over the broker's maxMessageSize goes dead with the
// broker's reason; its neighbours, in the same batches, are sent.
func TestOverMaxMessageSize(t *testing.T) {
	each(t, true, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "oversize")
		b.setConfig(t, "maxMessageSize", "16384")
		msgs := rows("os", topic, 21)
		// Random text compresses to about 3/4: still twice the limit after the client's zlib.
		msgs[10].Body = []byte(randomText(48 << 10))
		e.insert(t, msgs...)
		in := b.consume(t, topic)
		e.startRelay(t)
		testenv.Eventually(t, 60*time.Second, "the neighbours sent and the big one dead", func() bool {
			return e.count(t, "status = 2") == 20 && e.count(t, "status = 3") == 1
		})
		var reason string
		if err := e.db.QueryRow("SELECT COALESCE(fail_reason, '') FROM local_message WHERE msg_id = ?", msgs[10].MsgID).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(reason, "message is illegal") {
			t.Errorf("fail_reason %q does not carry the broker's reason (\"the message is illegal ...\")", reason)
		}
		t.Logf("fail_reason of the oversize row: %s", reason)
		got := in.wait(t, 20, 60*time.Second)
		if _, ok := got[msgs[10].MsgID]; ok {
			t.Error("the oversize message was consumed")
		}
	})
}

// TestBrokerRefusesWrites: a broker set read-only (brokerPermission=4) takes no message; the
// rows wait visibly (a reason in fail_reason, none sent, none dead), and once the broker is
// writable again the relay sends every one by itself.
func TestBrokerRefusesWrites(t *testing.T) {
	each(t, true, func(t *testing.T, b *target) {
		e := newEnv(t, b)
		topic := b.topic(t, "readonly")
		b.setConfig(t, "brokerPermission", "4")
		var probeErr error
		testenv.Eventually(t, 60*time.Second, "the broker to refuse a new producer", func() bool {
			probeErr = b.probe(topic)
			return probeErr != nil
		})
		t.Logf("a producer's error against the read-only broker: %v", probeErr)
		msgs := rows("ro", topic, 20)
		e.insert(t, msgs...)
		p := e.startRelay(t)
		var last string
		visible := func() bool {
			last = e.rowStates(t, "1=1")
			return e.count(t, "status = 2") == 0 && e.count(t, "fail_reason IS NOT NULL AND fail_reason <> ''") == len(msgs)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !visible() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if !visible() {
			t.Errorf("while the broker refuses writes, every row should be unsent with a reason; they are:\n%s\nrelay output:\n%s",
				last, tail(p.Out.String(), 4<<10))
		}
		if n := e.count(t, "status = 3"); n != 0 {
			t.Errorf("%d rows went dead while the broker refused writes", n)
		}
		in := b.consume(t, topic)
		b.setConfig(t, "brokerPermission", "6")
		testenv.Eventually(t, 120*time.Second, "every row sent once the broker is writable", func() bool {
			return e.count(t, "status = 2") == len(msgs)
		})
		in.wait(t, len(msgs), 60*time.Second)
	})
}
