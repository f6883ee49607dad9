// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// txListener answers the client's transaction callbacks from a table of states by message
// body, and records the check counts it was asked with.
type txListener struct {
	mu     sync.Mutex
	local  map[string]primitive.LocalTransactionState
	check  map[string]primitive.LocalTransactionState
	counts map[string][]int
}

func newTxListener() *txListener {
	return &txListener{local: map[string]primitive.LocalTransactionState{}, check: map[string]primitive.LocalTransactionState{}, counts: map[string][]int{}}
}

func (l *txListener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.local[string(m.Body)]
}

func (l *txListener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, _ := strconv.Atoi(m.GetProperty("TRANSACTION_CHECK_TIMES"))
	l.counts[string(m.Body)] = append(l.counts[string(m.Body)], n)
	return l.check[string(m.Body)]
}

func (l *txListener) set(body string, local, check primitive.LocalTransactionState) {
	l.mu.Lock()
	l.local[body], l.check[body] = local, check
	l.mu.Unlock()
}

func (l *txListener) checkCounts(body string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.counts[body]...)
}

func newTxProducer(t *testing.T, s *Server, group string, l primitive.TransactionListener) interface {
	SendMessageInTransaction(context.Context, *primitive.Message) (*primitive.TransactionSendResult, error)
} {
	t.Helper()
	p, err := producer.NewTransactionProducer(l,
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{s.NameServerAddr()})),
		producer.WithInstanceName(instanceName(t)),
		producer.WithGroupName(group),
		producer.WithRetry(0),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

func bodies(msgs []Message) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, string(m.Body))
	}
	return out
}

// TestTransactionCommitRollback: with rocketmq-client-go's transaction producer, a half
// committed by the local transaction becomes visible in its topic once, with its user
// properties and without the transaction's; a rolled-back one never does; neither is
// visible as a half any more.
func TestTransactionCommitRollback(t *testing.T) {
	s := startServer(t, Options{})
	l := newTxListener()
	p := newTxProducer(t, s, "tx-group", l)
	l.set("commit-me", primitive.CommitMessageState, primitive.UnkonwnState)
	l.set("roll-me", primitive.RollbackMessageState, primitive.UnkonwnState)
	ctx := waitCtx(t, 10*time.Second)
	for _, b := range []string{"commit-me", "roll-me"} {
		m := primitive.NewMessage("TxTopic", []byte(b))
		m.WithProperty("biz", "x")
		if _, err := p.SendMessageInTransaction(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "both halves resolved", func() bool {
		hs := s.Halves()
		return len(hs) == 2 && hs[0].Resolution == Committed && hs[1].Resolution == RolledBack
	})
	msgs := s.Messages("TxTopic")
	if got := bodies(msgs); len(got) != 1 || got[0] != "commit-me" {
		t.Fatalf("TxTopic holds %v, want [commit-me]", got)
	}
	m := msgs[0]
	if m.Properties["biz"] != "x" || m.Properties[propTransaction] != "" || m.Properties[propRealTopic] != "" {
		t.Fatalf("committed message properties %v: want biz kept, TRAN_MSG and REAL_TOPIC gone", m.Properties)
	}
	if n := len(s.Messages(halfTopic)); n != 2 {
		t.Fatalf("%s holds %d halves, want 2", halfTopic, n)
	}
}

// TestTransactionCheckBack: a half left UNKNOWN is checked back with a producer of its
// group, with TRANSACTION_CHECK_TIMES counting 1, 2, ...; the check's COMMIT makes it
// visible once.
func TestTransactionCheckBack(t *testing.T) {
	s := startServer(t, Options{TransactionTimeout: time.Nanosecond})
	l := newTxListener()
	p := newTxProducer(t, s, "tx-check", l)
	l.set("later", primitive.UnkonwnState, primitive.UnkonwnState)
	if _, err := p.SendMessageInTransaction(waitCtx(t, 5*time.Second), primitive.NewMessage("TxTopic", []byte("later"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the producer registered", func() bool { return len(s.Producers("tx-check")) == 1 })
	// One round at a time: the client hands each incoming request to its own goroutine, so
	// two checks sent back to back may reach the listener in either order.
	for i := 1; i <= 2; i++ {
		if n := s.TriggerCheck(); n != 1 {
			t.Fatalf("check round %d sent %d checks, want 1", i, n)
		}
		waitFor(t, 5*time.Second, "the check answered", func() bool { return len(l.checkCounts("later")) == i })
	}
	if got := l.checkCounts("later"); got[0] != 1 || got[1] != 2 {
		t.Fatalf("checks carried TRANSACTION_CHECK_TIMES %v, want [1 2]", got)
	}
	if s.Count("TxTopic") != 0 {
		t.Fatal("an UNKNOWN half became visible")
	}
	l.set("later", primitive.UnkonwnState, primitive.CommitMessageState)
	s.TriggerCheck()
	waitFor(t, 5*time.Second, "the check's COMMIT applied", func() bool { h, _ := s.Half(s.Halves()[0].UniqKey); return h.Resolution == Committed })
	if got := bodies(s.Messages("TxTopic")); len(got) != 1 {
		t.Fatalf("TxTopic holds %v after the check's COMMIT, want one message", got)
	}
	if s.TriggerCheck() != 0 {
		t.Fatal("a committed half was checked again")
	}
}

// TestTransactionDiscardAfterMax: a half nobody answers spends its checks even with no
// producer registered, and after TransactionCheckMax it lands in TRANS_CHECK_MAX_TIME_TOPIC,
// never in its topic.
func TestTransactionDiscardAfterMax(t *testing.T) {
	s := startServer(t, Options{TransactionTimeout: time.Nanosecond, TransactionCheckMax: 3})
	l := newTxListener()
	p := newTxProducer(t, s, "tx-discard", l)
	l.set("orphan", primitive.UnkonwnState, primitive.UnkonwnState)
	if _, err := p.SendMessageInTransaction(waitCtx(t, 5*time.Second), primitive.NewMessage("TxTopic", []byte("orphan"))); err != nil {
		t.Fatal(err)
	}
	s.SetTxFaults(TxFaults{DropChecks: 1})
	for i := 0; i < 4; i++ {
		s.TriggerCheck()
	}
	h := s.Halves()[0]
	if h.Resolution != Discarded || h.Checks != 4 {
		t.Fatalf("half after 4 rounds: %+v, want discarded with 4 checks", h)
	}
	if n := s.Count(checkMaxTopic); n != 1 || s.Count("TxTopic") != 0 {
		t.Fatalf("%s holds %d, TxTopic %d; want 1 and 0", checkMaxTopic, n, s.Count("TxTopic"))
	}
	if s.ChecksSent() != 0 {
		t.Fatalf("%d checks sent while DropChecks=1", s.ChecksSent())
	}
}

// TestTransactionEndFaults: a dropped END leaves the half pending (checked later); END
// with the wrong group is refused with 5.3.3's remark; a second valid COMMIT stores a
// second copy (the broker fences nothing); LoseOpsOnStop brings a resolved half back.
func TestTransactionEndFaults(t *testing.T) {
	s := startServer(t, Options{TransactionTimeout: time.Hour})
	l := newTxListener()
	p := newTxProducer(t, s, "tx-faults", l)
	l.set("dropped", primitive.CommitMessageState, primitive.UnkonwnState)
	s.SetTxFaults(TxFaults{DropEndTransaction: 1})
	if _, err := p.SendMessageInTransaction(waitCtx(t, 5*time.Second), primitive.NewMessage("TxTopic", []byte("dropped"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the producer's END received", func() bool { return s.EndTransactions() == 1 })
	s.SetTxFaults(TxFaults{})
	h := s.Halves()[0]
	if h.Resolution != Pending {
		t.Fatalf("half after a dropped END: %+v, want pending", h)
	}
	half := s.Messages(halfTopic)[0]
	end := func(group string) *command {
		return rawRequest(t, s.BrokerAddr(), &command{Code: reqEndTransaction, Ext: map[string]string{
			"producerGroup": group, "tranStateTableOffset": strconv.FormatInt(half.QueueOffset, 10),
			"commitLogOffset": strconv.FormatInt(half.CommitLogOffset, 10), "commitOrRollback": "8",
			"msgId": half.MsgID, "fromTransactionCheck": "false",
		}})
	}
	if r := end("other-group"); r.Code != resSystemError || r.Remark != "The producer group wrong" {
		t.Fatalf("END with a wrong group: %d %q", r.Code, r.Remark)
	}
	for i := 0; i < 2; i++ {
		if r := end("tx-faults"); r.Code != resSuccess {
			t.Fatalf("END COMMIT %d: %d %q", i+1, r.Code, r.Remark)
		}
	}
	if n := s.Count("TxTopic"); n != 2 {
		t.Fatalf("two valid COMMITs stored %d messages, want 2 (no fence)", n)
	}
	s.SetTxFaults(TxFaults{LoseOpsOnStop: true})
	s.StopBroker()
	if err := s.StartBroker(); err != nil {
		t.Fatal(err)
	}
	if h := s.Halves()[0]; h.Resolution != Pending {
		t.Fatalf("half after a restart losing its op: %+v, want pending again", h)
	}
}
