// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay/message"
)

// The failure judgement, with a fake clock and no database or broker: each row of the
// failure-accounting table of docs/decisions.md that the judgement decides. A result of kind
// retry costs the row an attempt (retry_count + 1, dead past max_retry_count unless capped);
// deferred costs none; dead is dead at once. The classifier's rows (which answer is which
// kind) are in relay/rocketmq/classify_internal_test.go.

// fakeClock is a clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newJudge() (*incidents, *fakeClock) {
	clock := &fakeClock{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	return newIncidents(zerolog.Nop(), nil, clock.now), clock
}

// judgePage judges one page of failed sends to topic, one per error, and returns their results.
func judgePage(in *incidents, topic string, errs ...error) []result {
	items := make([]item, len(errs))
	results := make([]result, len(errs))
	for i, err := range errs {
		items[i] = item{msg: &Message{Topic: topic}}
		results[i] = failResult(err)
	}
	in.judge(items, results)
	return results
}

func sendErr(kind message.SendErrorKind, broker string) error {
	return &SendError{Kind: kind, Broker: broker, Code: -1, Err: errors.New(kind.String() + " failure")}
}

func wantCounted(t *testing.T, what string, r result) {
	t.Helper()
	if r.kind != retry || r.capped {
		t.Fatalf("%s: kind %d capped %v, want a counted retry that can go dead", what, r.kind, r.capped)
	}
}

func wantDeferred(t *testing.T, what string, r result, mark string, min, max time.Duration) {
	t.Helper()
	if r.kind != deferred {
		t.Fatalf("%s: kind %d, want deferred (no attempt counted)", what, r.kind)
	}
	if !strings.HasSuffix(r.reason, mark) {
		t.Fatalf("%s: reason %q does not end %q", what, r.reason, mark)
	}
	if r.delay < min || r.delay > max {
		t.Fatalf("%s: deferred %v, want within [%v, %v]", what, r.delay, min, max)
	}
}

func TestJudgePermanentIsDeadAtOnce(t *testing.T) {
	in, _ := newJudge()
	r := judgePage(in, "orders", sendErr(message.SendPermanent, "b:1"))[0]
	if r.kind != dead || !strings.HasPrefix(r.reason, "refused by the broker: ") {
		t.Fatalf("a permanent failure: kind %d reason %q, want dead with the broker's refusal", r.kind, r.reason)
	}
	if r := judgePage(in, "orders", &message.PermanentError{Err: errors.New("too large")})[0]; r.kind != dead {
		t.Fatalf("a PermanentError mark: kind %d, want dead", r.kind)
	}
}

func TestJudgeRefusedAndUnreplicatedCount(t *testing.T) {
	in, _ := newJudge()
	wantCounted(t, "refused (a broker's answer for this message)", judgePage(in, "orders", sendErr(message.SendRefused, "b:1"))[0])
	wantCounted(t, "unreplicated with require_replication", judgePage(in, "orders", sendErr(message.SendUnreplicated, "b:1"))[0])
	// Refusals are about the message: several at once are no incident of the broker.
	for i, r := range judgePage(in, "orders", sendErr(message.SendRefused, "b:1"), sendErr(message.SendRefused, "b:1"), message.Refused(errors.New("no"))) {
		wantCounted(t, fmt.Sprintf("refusal %d of a page of refusals", i), r)
	}
}

func TestJudgeTransientAloneCountsButNeverKills(t *testing.T) {
	in, _ := newJudge()
	r := judgePage(in, "orders", sendErr(message.SendTransient, "b:1"))[0]
	if r.kind != retry || !r.capped {
		t.Fatalf("the only transient failure of its broker: kind %d capped %v, want a capped retry", r.kind, r.capped)
	}
	// An unmarked error is transient too (KindOf's default), of a broker of its own.
	if r := judgePage(in, "orders", errors.New("i/o timeout"))[0]; r.kind != retry || !r.capped {
		t.Fatalf("an unmarked error: kind %d capped %v, want a capped retry", r.kind, r.capped)
	}
}

func TestJudgeTransientIncidentDefersWithoutCounting(t *testing.T) {
	in, clock := newJudge()
	// Two transient failures of one broker in one page: an incident, no attempt counted.
	for _, r := range judgePage(in, "orders", sendErr(message.SendTransient, "b:1"), sendErr(message.SendTransient, "b:1")) {
		wantDeferred(t, "a broker's incident", r, deferredMark, 0, deferMax*5/4)
	}
	// Another broker's lone failure in the same window is not part of it.
	if r := judgePage(in, "orders", sendErr(message.SendTransient, "b:2"))[0]; r.kind != retry || !r.capped {
		t.Fatalf("another broker's lone failure: kind %d capped %v, want a capped retry", r.kind, r.capped)
	}
	// A failure of the first broker within the window is still the incident's.
	clock.advance(incidentWindow - time.Second)
	wantDeferred(t, "a failure inside the incident window", judgePage(in, "orders", sendErr(message.SendTransient, "b:1"))[0], deferredMark, 0, deferMax*5/4)
	// Past the window with no other failure, a lone failure counts again.
	clock.advance(incidentWindow + time.Second)
	if r := judgePage(in, "orders", sendErr(message.SendTransient, "b:1"))[0]; r.kind != retry || !r.capped {
		t.Fatalf("a lone failure after the window: kind %d capped %v, want a capped retry", r.kind, r.capped)
	}
}

func TestJudgeUnreachableDefersWithoutCounting(t *testing.T) {
	in, _ := newJudge()
	wantDeferred(t, "nothing reached a broker", judgePage(in, "orders", sendErr(message.SendUnreachable, ""))[0], deferredMark, 0, deferMax*5/4)
	wantDeferred(t, "message.ErrBrokerUnreachable mark", judgePage(in, "orders", message.ErrBrokerUnreachable)[0], deferredMark, 0, deferMax*5/4)
}

func TestJudgeBrokerBackoffGrowsWhileNothingIsAcknowledged(t *testing.T) {
	in, clock := newJudge()
	var last time.Duration
	for round := 0; round < 12; round++ {
		rs := judgePage(in, "orders", sendErr(message.SendUnreachable, "b:1"), sendErr(message.SendUnreachable, "b:1"))
		if rs[0].delay > deferMax*5/4 {
			t.Fatalf("round %d: deferred %v, past the cap %v", round, rs[0].delay, deferMax)
		}
		last = rs[0].delay
		clock.advance(time.Second)
	}
	if last < deferMax*3/4 {
		t.Fatalf("after 12 pages of nothing acknowledged the deferral is %v, want near the cap %v", last, deferMax)
	}
}

func TestJudgeTopicMissing(t *testing.T) {
	in, clock := newJudge()
	// The first 10 s a topic is seen without a route: not counted.
	r := judgePage(in, "new-topic", sendErr(message.SendTopicMissing, ""))[0]
	if r.kind != deferred || !strings.Contains(r.reason, "no route yet: attempt not counted") {
		t.Fatalf("a topic first seen without a route: kind %d reason %q, want deferred, not counted", r.kind, r.reason)
	}
	clock.advance(topicMissingGrace - time.Millisecond)
	if r := judgePage(in, "new-topic", sendErr(message.SendTopicMissing, ""))[0]; r.kind != deferred {
		t.Fatalf("just inside the grace: kind %d, want deferred", r.kind)
	}
	// After the grace it is the topic's own problem: counted, dead after its retries.
	clock.advance(time.Millisecond)
	wantCounted(t, "a topic without a route past the grace", judgePage(in, "new-topic", message.ErrTopicNotFound)[0])

	// A topic this process delivered before: its brokers left, an outage, never counted.
	in.success("known")
	clock.advance(time.Hour)
	for i := 0; i < 3; i++ {
		wantDeferred(t, "a delivered topic without a route", judgePage(in, "known", sendErr(message.SendTopicMissing, "b:1"))[0], deferredMark, 0, deferMax*5/4)
		clock.advance(topicMissingGrace)
	}
}

func TestJudgeMisconfiguredWaitsLongerTheLongerItIsRefused(t *testing.T) {
	in, clock := newJudge()
	first := judgePage(in, "acl-topic", sendErr(message.SendMisconfigured, "b:1"))[0]
	wantDeferred(t, "the first refusal of the configuration", first, misconfiguredMark, deferBase/2, deferBase*2)
	if got := in.misconfiguredTopics(); got["acl-topic"] == "" {
		t.Fatalf("the refused topic is not reported: %v", got)
	}
	clock.advance(8 * time.Second)
	later := judgePage(in, "acl-topic", sendErr(message.SendMisconfigured, "b:1"))[0]
	wantDeferred(t, "refused for 8 s", later, misconfiguredMark, 4*time.Second, 12*time.Second)
	clock.advance(time.Hour)
	wantDeferred(t, "refused for an hour", judgePage(in, "acl-topic", sendErr(message.SendMisconfigured, "b:1"))[0], misconfiguredMark, deferMax*3/4, deferMax*5/4)
	// Misconfiguration is never an incident of the broker: the broker's other topics count as usual.
	if r := judgePage(in, "other", sendErr(message.SendTransient, "b:1"))[0]; r.kind != retry || !r.capped {
		t.Fatalf("a lone transient failure beside a refused topic: kind %d capped %v", r.kind, r.capped)
	}
	// An accepted send clears the report.
	in.success("acl-topic")
	if got := in.misconfiguredTopics(); got["acl-topic"] != "" {
		t.Fatalf("the topic is still reported after an accepted send: %v", got)
	}
}

func TestJudgeBrokerRecoversWithAnAcknowledgedPage(t *testing.T) {
	in, clock := newJudge()
	judgePage(in, "orders", sendErr(message.SendUnreachable, "b:1"), sendErr(message.SendUnreachable, "b:1"))
	if _, failing := in.failingBrokers()["b:1"]; !failing {
		t.Fatalf("the broker is not reported failing after a page of failures: %v", in.failingBrokers())
	}
	clock.advance(time.Second)
	items := []item{{msg: &Message{Topic: "orders"}}}
	results := []result{{kind: sent}}
	if !in.judge(items, results) {
		t.Fatal("a page with an acknowledged send and no failure of the broker did not end its incident")
	}
	if _, failing := in.failingBrokers()["b:1"]; failing {
		t.Fatal("the broker is still reported failing")
	}
}
