// SPDX-License-Identifier: Apache-2.0

package brokersuite

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// aclUser creates an ACL 2.0 user of broker-acl allowed to publish to and look up (Sub, for
// QUERY_MESSAGE) every topic and to read the discarded halves (TRANS_CHECK_MAX_TIME_TOPIC as group outbox-relay-txrecover), as
// docs/transactional.md asks of a relay answering check-backs there.
func aclUser(t *testing.T, b *target) primitive.Credentials {
	t.Helper()
	user := primitive.Credentials{AccessKey: "txrelay" + testenv.RandomSuffix(8), SecretKey: "s-" + testenv.RandomSuffix(12)}
	for _, args := range [][]string{
		{"createUser", "-b", b.brokerAddr, "-u", user.AccessKey, "-p", user.SecretKey, "-t", "Normal"},
		{"createAcl", "-b", b.brokerAddr, "-s", "User:" + user.AccessKey, "-r", "Topic:*", "-a", "Pub,Sub", "-d", "Allow"},
		{"createAcl", "-b", b.brokerAddr, "-s", "User:" + user.AccessKey, "-r", "Topic:TRANS_CHECK_MAX_TIME_TOPIC,Group:outbox-relay-txrecover", "-a", "Sub", "-d", "Allow"},
	} {
		out, err := runScript(append([]string{"deploy-admin"}, args...)...)
		if err != nil || !strings.Contains(out, "success") {
			t.Fatalf("mqadmin %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return user
}

// handedSender marks its halves as a writer of handed rows does (OUTBOX_TX=h).
type handedSender struct{ txmsg.Sender }

func (s handedSender) SendSync(ctx context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	for _, m := range msgs {
		m.WithProperty(outbox.WriterProperty, "h")
	}
	return s.Sender.SendSync(ctx, msgs...)
}

// TestTransactionalCheckBacksWithACL: on broker-acl (ACL 2.0), a relay given
// rocketmq.access_key and secret_key answers check-backs with signed requests, and the Go
// writer's END_TRANSACTION is signed too: the confirmed writer's END is acknowledged; a
// handed row whose writer died before its END is committed by the relay's check answer
// (synchronous, so a refused COMMIT would leave the row handed); and one whose half the broker
// discarded while the relay was down is read back from TRANS_CHECK_MAX_TIME_TOPIC (a signed
// PULL) and sent by the relay. Each message is consumed once.
func TestTransactionalCheckBacksWithACL(t *testing.T) {
	t.Parallel()
	b := aclTarget(t)
	user := aclUser(t, b)
	e := newEnv(t, b)
	topic := b.mqadminTopic(t, "acltx")
	group := "outbox_tx_acl_" + testenv.RandomSuffix(8)
	relayEnv := []string{"OUTBOX_ROCKETMQ_ACCESS_KEY=" + user.AccessKey, "OUTBOX_ROCKETMQ_SECRET_KEY=" + user.SecretKey,
		"OUTBOX_ROCKETMQ_TRANSACTION_CHECK_GROUPS=" + group, txSecretEnv, "OUTBOX_LOG_LEVEL=debug"}
	relay := e.startRelay(t, relayEnv...)
	in := b.consume(t, topic)
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{b.nameServer})),
		producer.WithGroupName("txw_"+testenv.RandomSuffix(8)),
		producer.WithInstanceName("txw-"+testenv.RandomSuffix(8)),
		producer.WithRetry(0),
		producer.WithCredentials(user),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	newWriter := func(s txmsg.Sender) *txmsg.Producer {
		tp, err := txmsg.New(txmsg.Config{Writer: e.writer, Sender: s, NameServers: []string{b.nameServer},
			CheckGroup: group, Secret: txSecret, Grace: time.Hour, AccessKey: user.AccessKey, SecretKey: user.SecretKey})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tp.Close() })
		return tp
	}
	confirmed, handed := newWriter(p), newWriter(handedSender{p})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	prepare := func(tp *txmsg.Producer, body string, handedRow bool) (*sql.Tx, *txmsg.Half) {
		t.Helper()
		tx, h := prepareHalf(ctx, t, e, tp, topic, body)
		if handedRow {
			if _, err := tx.ExecContext(ctx, "UPDATE local_message SET status = 4 WHERE msg_id = ?", h.MsgID()); err != nil {
				t.Fatal(err)
			}
		}
		return tx, h
	}
	testenv.Eventually(t, 30*time.Second, "the relay answering check-backs", func() bool {
		return strings.Contains(relay.Out.String(), "answering transactional check-backs")
	})

	// The confirmed writer's signed END is acknowledged.
	tx, ended := prepare(confirmed, "acl-ended", false)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := confirmed.Finish(ctx, e.db.DB, ended, nil); err != nil {
		t.Fatalf("Finish on the ACL broker: %v", err)
	}
	// A handed row whose writer dies before its END: the relay's signed COMMIT delivers it.
	tx, killed := prepare(handed, "acl-killed", true)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, checkBudget, "the handed row committed by the relay's check and marked sent", func() bool {
		return e.count(t, "msg_id = ? AND status = 2", killed.MsgID()) == 1
	})
	if !answered(relay.Out.String(), killed.MsgID(), "handed_commit") {
		t.Fatalf("no handed_commit answer for the killed writer's half\n%s", tail(relay.Out.String(), 3000))
	}

	// The relay down for the broker's whole check window: the half is discarded, then read
	// back with a signed pull once the relay is back.
	relay.Kill9(t)
	tx, lost := prepare(handed, "acl-discarded", true)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	admin := remoting.WithCredentials(remoting.Credentials{AccessKey: b.creds.AccessKey, SecretKey: b.creds.SecretKey})
	testenv.Eventually(t, checkWindow(t, b.brokerAddr, admin), "the broker to discard the half after its last check", func() bool {
		return discarded(t, b.brokerAddr, lost.MsgID(), admin)
	})
	relay = e.startRelay(t, relayEnv...)
	testenv.Eventually(t, checkBudget, "the discarded half's row sent by the relay", func() bool {
		return e.count(t, "msg_id = ? AND status = 2", lost.MsgID()) == 1
	})
	if !strings.Contains(relay.Out.String(), "the broker discarded a handed row's half") {
		t.Fatalf("the row was not recovered from TRANS_CHECK_MAX_TIME_TOPIC\n%s", tail(relay.Out.String(), 3000))
	}
	in.wait(t, 3, 60*time.Second)
	for name, h := range map[string]*txmsg.Half{"ended": ended, "killed": killed, "discarded": lost} {
		if n := in.copies(h.MsgID()); n != 1 {
			t.Errorf("%s: consumed %d times, want once", name, n)
		}
	}
}
