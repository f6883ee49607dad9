// SPDX-License-Identifier: Apache-2.0

package brokeraudit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/brokeraudit"
	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
)

const topic = "AuditOrders"

func startRMQ(t *testing.T) *rmqtest.Server {
	t.Helper()
	srv, err := rmqtest.Start(rmqtest.Options{NoAutoCreateTopics: true, Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.CreateTopic(topic, 2)
	return srv
}

func lookup(ns string) *brokeraudit.RocketMQ {
	return brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{ns}, Timeout: 2 * time.Second})
}

// Every acknowledged message is found where the broker said it stored it.
func TestRMQTestPresent(t *testing.T) {
	srv := startRMQ(t)
	ps := append(send(t, srv.NameServerAddr(), topic, 40), sendBatches(t, srv.NameServerAddr(), topic, 40, 10)...)
	l := lookup(srv.NameServerAddr())
	expect(t, ps, check(t, l, ps), always(brokeraudit.Present))
	// 40 offsets in each of 2 queues: one route and two pulls per queue (32 + 8).
	if n := l.Requests(); n != 5 {
		t.Errorf("%d requests for 80 positions in 2 queues, want 5", n)
	}
}

// A queue whose tail was dropped after the acknowledgements: the positions at and after the
// cut are Missing, the others Present.
func TestRMQTestTailLost(t *testing.T) {
	srv := startRMQ(t)
	ps := send(t, srv.NameServerAddr(), topic, 20)
	if n, err := srv.TruncateQueue(topic, 1, 4); err != nil || n != 6 {
		t.Fatalf("TruncateQueue = %d, %v; want 6 dropped", n, err)
	}
	fs := check(t, lookup(srv.NameServerAddr()), ps)
	expect(t, ps, fs, func(p brokeraudit.Position) brokeraudit.Verdict {
		if p.QueueID == 1 && p.Offset >= 4 {
			return brokeraudit.Missing
		}
		return brokeraudit.Present
	})
	reasonsSay(t, ps, fs, brokeraudit.Missing, "ends at offset 4")
}

// A truncated queue written again: other messages sit at the lost ones' offsets.
func TestRMQTestOtherMessageAtOffset(t *testing.T) {
	srv := startRMQ(t)
	ns := srv.NameServerAddr()
	ps := send(t, ns, topic, 10)
	for q := range 2 {
		if _, err := srv.TruncateQueue(topic, q, 2); err != nil {
			t.Fatal(err)
		}
	}
	later := send(t, ns, topic, 10) // the same offsets again, other messages
	fs := check(t, lookup(ns), append(ps, later...))
	expect(t, append(ps, later...), fs, func(p brokeraudit.Position) brokeraudit.Verdict {
		if p.Offset >= 2 && strings.HasPrefix(p.MsgID, ps[0].MsgID[:6]) {
			return brokeraudit.Missing
		}
		return brokeraudit.Present
	})
	reasonsSay(t, ps, fs[:len(ps)], brokeraudit.Missing, "another message")
}

// A failover to a replica that lacks the tail: the broker keeps its name and address, the
// messages acknowledged after the replica's copy are gone, and the commit log offsets of
// the lost ones are handed out again (their offset message ids find other messages).
func TestRMQTestFailoverToStaleReplica(t *testing.T) {
	srv := startRMQ(t)
	ns := srv.NameServerAddr()
	before := send(t, ns, topic, 12)
	snap := srv.Snapshot()
	lost := send(t, ns, topic, 12)
	if err := srv.Failover(snap); err != nil {
		t.Fatal(err)
	}
	after := send(t, ns, topic, 4) // reuses offsets of some lost ones
	all := append(append(append([]brokeraudit.Position(nil), before...), lost...), after...)
	expectLost(t, ns, all, lost)
}

// A queue whose head was dropped: within the broker's retention the messages were lost;
// past it the broker may have deleted them on schedule, so the lookup cannot tell.
func TestRMQTestHeadDropped(t *testing.T) {
	srv := startRMQ(t)
	ps := send(t, srv.NameServerAddr(), topic, 12)
	if _, err := srv.DropQueueHead(topic, 0, 3); err != nil {
		t.Fatal(err)
	}
	below := func(v brokeraudit.Verdict) func(brokeraudit.Position) brokeraudit.Verdict {
		return func(p brokeraudit.Position) brokeraudit.Verdict {
			if p.QueueID == 0 && p.Offset < 3 {
				return v
			}
			return brokeraudit.Present
		}
	}
	expect(t, ps, check(t, lookup(srv.NameServerAddr()), ps), below(brokeraudit.Missing))
	old := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{srv.NameServerAddr()},
		Retention: time.Hour, Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
	expect(t, ps, check(t, old, ps), below(brokeraudit.Unknown))
}

// A broker that does not answer, a broker name gone from the route, a topic without a route
// and a position recorded with a negative offset are Unknown, never Missing; name servers that do not answer fail the whole Check.
func TestRMQTestUnknown(t *testing.T) {
	srv := startRMQ(t)
	ns := srv.NameServerAddr()
	ps := send(t, ns, topic, 6)
	gone := ps[0]
	gone.Broker = "broker-gone"
	noRoute := ps[1]
	noRoute.Topic = "NeverCreated"
	garbage := ps[2]
	garbage.Offset = -1
	all := append(ps, gone, noRoute, garbage)
	fs := check(t, lookup(ns), all[len(ps):])
	for i, want := range []string{"not in the route", "no route", "recorded incompletely"} {
		if fs[i].Verdict != brokeraudit.Unknown || !strings.Contains(fs[i].Reason, want) {
			t.Errorf("finding %+v does not say %q", fs[i], want)
		}
	}
	srv.StopBroker()
	fs = check(t, lookup(ns), all)
	expect(t, all, fs, always(brokeraudit.Unknown))
	for i, want := range map[int]string{0: "unreachable", len(ps): "not in the route", len(ps) + 1: "no route"} {
		if !strings.Contains(fs[i].Reason, want) {
			t.Errorf("reason %q does not say %q", fs[i].Reason, want)
		}
	}
	srv.Close()
	if _, err := lookup(ns).Check(context.Background(), ps); err == nil {
		t.Fatal("Check with no name server answering succeeded")
	}
}

// Probe: a broker that serves pulls can be asked; rmqtest's name server for a proxy that
// does not (a listener answering REQUEST_CODE_NOT_SUPPORTED) is covered on the real proxy.
func TestRMQTestProbe(t *testing.T) {
	srv := startRMQ(t)
	l := brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{srv.NameServerAddr()}, ProbeTopics: []string{topic}})
	if err := l.Probe(context.Background()); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	srv.StopBroker()
	err := l.Probe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot be asked") {
		t.Fatalf("Probe with the broker down = %v", err)
	}
	t.Log(err)
}

// A probe topic not created yet is passed over: nothing of it was sent, and check lists it as
// missing, so it must not switch the audit off for the topics that exist. When none of the
// probe topics has a route, Probe says so rather than passing with nothing asked.
func TestRMQTestProbePassesOverMissingTopics(t *testing.T) {
	srv := startRMQ(t)
	probe := func(topics ...string) error {
		return brokeraudit.NewRocketMQ(brokeraudit.RocketMQConfig{NameServers: []string{srv.NameServerAddr()}, ProbeTopics: topics}).
			Probe(context.Background())
	}
	if err := probe("NotCreatedYet", topic); err != nil {
		t.Fatalf("Probe of a missing and an existing topic: %v", err)
	}
	err := probe("NotCreatedYet", "NorThisOne")
	if err == nil || !strings.Contains(err.Error(), "no topic to probe has a route (NotCreatedYet, NorThisOne)") {
		t.Fatalf("Probe of missing topics only = %v", err)
	}
}

// A position whose queue offset was recorded wrong, but whose offset message id is right, is
// found by the id: the broker holds the message, so it is Present, not Missing.
func TestRMQTestFoundByOffsetMsgID(t *testing.T) {
	srv := startRMQ(t)
	ps := send(t, srv.NameServerAddr(), topic, 4)
	wrong := ps[0]
	wrong.Offset += 1 // another message's offset, or the queue's end
	fs := check(t, lookup(srv.NameServerAddr()), []brokeraudit.Position{wrong})
	if fs[0].Verdict != brokeraudit.Present || !strings.Contains(fs[0].Reason, "offset message id") {
		t.Fatalf("finding %+v", fs[0])
	}
	wrong.OffsetMsgID = ps[1].OffsetMsgID // the id of another message: Missing
	if fs := check(t, lookup(srv.NameServerAddr()), []brokeraudit.Position{wrong}); fs[0].Verdict != brokeraudit.Missing {
		t.Fatalf("finding %+v", fs[0])
	}
}

// expectLost checks every position of all: those of lost Missing, the others Present.
func expectLost(t *testing.T, ns string, all, lost []brokeraudit.Position) {
	t.Helper()
	lostIDs := map[string]bool{}
	for _, p := range lost {
		lostIDs[p.MsgID] = true
	}
	expect(t, all, check(t, lookup(ns), all), func(p brokeraudit.Position) brokeraudit.Verdict {
		if lostIDs[p.MsgID] {
			return brokeraudit.Missing
		}
		return brokeraudit.Present
	})
}
