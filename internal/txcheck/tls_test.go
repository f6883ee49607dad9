// SPDX-License-Identifier: Apache-2.0

package txcheck_test

import (
	"crypto/tls"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/testcerts"
	"github.com/outbox-relay/outbox-relay/internal/tlsbridge"
	"github.com/outbox-relay/outbox-relay/internal/txcheck"
	"github.com/outbox-relay/outbox-relay/outbox/txmsg"
)

// Over TLS verified against the broker's CA and name, end to end: the writer's half and the
// relay's send go through the verifying bridge, the check responder dials the broker with
// the same verification; a writer that dies before END has its row delivered once by the
// relay after the check, as in plain TCP.
func TestCheckAndRelayOverVerifiedTLS(t *testing.T) {
	ca := testcerts.NewCA(t, "mq")
	const name = "rocketmq.test"
	verify := &tls.Config{RootCAs: ca.Pool(), ServerName: name}
	opts := rmqtest.Options{TLS: &tls.Config{Certificates: []tls.Certificate{ca.Issue(t, name)}}}
	w := setupVia(t, opts, time.Hour, func(srv *rmqtest.Server) []string {
		b, err := tlsbridge.Start(tlsbridge.Config{TLS: verify}, []string{srv.NameServerAddr()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return b.NameServers()
	})
	w.tls = verify
	w.startRelay()
	w.startResponder()
	w.writerDiesBeforeEnd("over-tls")
}

// writerDiesBeforeEnd commits a prepared half's row and never ends the half; the check
// answers ROLLBACK and pulls the row forward, and the relay delivers it once. It returns
// the half.
func (w *world) writerDiesBeforeEnd(body string) *txmsg.Half {
	w.t.Helper()
	tx, h := w.prepare(body)
	w.commit(tx) // ... and the writer dies: no Finish
	if n := w.broker.TriggerCheck(); n != 1 {
		w.t.Fatalf("%d checks sent, want 1", n)
	}
	w.waitDeliveredOnce(h.MsgID())
	if w.answers("rollback", txcheck.ReasonRelayDelivers) != 1 {
		w.t.Fatal("the check was not answered rollback/relay_delivers")
	}
	return h
}
