// SPDX-License-Identifier: Apache-2.0

package publishertest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/publishertest"
)

// broken publishers, each wrapping the RocketMQ publisher and breaking one promise of the
// contract, and the suite's subtests each must fail.
var broken = []brokenCase{
	{
		name: "acks-without-storing", // answers nil and sends nothing
		send: func(relay.Publisher, context.Context, relay.Route, ...*relay.Message) error { return nil },
		fails: []string{"Acknowledgement/StoredAsSent", "Batch/AcknowledgedWhole", "Batch/RefusedWhole",
			"FailureKinds/UnknownTopicIsTopicMissing", "FailureKinds/BrokerDownIsUnreachable", "OrderedKeys"},
	},
	{
		name: "splits-batches", // sends a batch as two halves and answers the second half's result
		send: func(p relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
			if len(msgs) > 1 {
				_ = p.Send(ctx, route, msgs[:len(msgs)/2]...)
				msgs = msgs[len(msgs)/2:]
			}
			return p.Send(ctx, route, msgs...)
		},
		fails: []string{"Batch/RefusedWhole"},
	},
	{
		name: "refusal-as-transient", // reports every failure as one the broker may not repeat
		send: func(p relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
			if err := p.Send(ctx, route, msgs...); err != nil {
				return &relay.SendError{Kind: relay.SendTransient, Code: -1, Err: errors.New(err.Error())}
			}
			return nil
		},
		fails: []string{"Batch/RefusedWhole", "FailureKinds/UnknownTopicIsTopicMissing", "FailureKinds/OversizedMessageIsPermanent",
			"FailureKinds/ConfigurationRefusalIsMisconfigured", "FailureKinds/BrokerDownIsUnreachable"},
	},
	{
		name: "batch-refusal-as-permanent", // a refused batch reported permanent: the relay would make all its rows dead
		send: func(p relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
			err := p.Send(ctx, route, msgs...)
			if relay.KindOf(err) == relay.SendRefused {
				return &relay.SendError{Kind: relay.SendPermanent, Code: -1, Err: errors.New(err.Error())}
			}
			return err
		},
		fails: []string{"Batch/RefusedWhole", "FailureKinds/RefusedMessageIsRefused"},
	},
	{
		name: "lost-reply-as-acknowledged", // answers nil when the broker's reply did not come
		send: func(p relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
			if err := p.Send(ctx, route, msgs...); relay.KindOf(err) != relay.SendTransient {
				return err
			}
			return nil
		},
		fails: []string{"FailureKinds/SlowBrokerIsTransient", "FailureKinds/LostAcknowledgementIsTransient"},
	},
	{
		name: "scatters-keys", // drops the sharding key: each message goes round robin
		send: func(p relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
			out := make([]*relay.Message, len(msgs))
			for i, m := range msgs {
				c := *m
				c.ShardingKey = ""
				out[i] = &c
			}
			return p.Send(ctx, route, out...)
		},
		fails: []string{"KeyedBatches", "OrderedKeys"},
	},
	{
		name: "reverses-batches", // sends a batch's messages in reverse order
		send: func(p relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
			out := slices.Clone(msgs)
			slices.Reverse(out)
			return p.Send(ctx, route, out...)
		},
		fails: []string{"KeyedBatches"},
	},
}

// brokenCase is a broken publisher's Send and the subtests the suite must fail for it.
type brokenCase struct {
	name  string
	send  func(inner relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error
	fails []string
}

// brokenPublisher is a RocketMQ publisher whose Send is replaced; it stays a KeyBatcher.
type brokenPublisher struct {
	relay.Publisher
	send func(inner relay.Publisher, ctx context.Context, route relay.Route, msgs ...*relay.Message) error
}

func (b brokenPublisher) Send(ctx context.Context, route relay.Route, msgs ...*relay.Message) error {
	return b.send(b.Publisher, ctx, route, msgs...)
}

func (b brokenPublisher) QueueOf(topic, key string) (string, bool) {
	return b.Publisher.(relay.KeyBatcher).QueueOf(topic, key)
}

// brokenEnv names the broken publisher TestBrokenPublisher runs the suite on.
const brokenEnv = "PUBLISHERTEST_BROKEN"

// TestBrokenPublisher runs the suite on the broken publisher named by PUBLISHERTEST_BROKEN,
// in the process TestSuiteFailsBrokenPublishers starts; it is skipped otherwise.
func TestBrokenPublisher(t *testing.T) {
	name := os.Getenv(brokenEnv)
	if name == "" {
		t.Skip(brokenEnv + " names no broken publisher (TestSuiteFailsBrokenPublishers sets it)")
	}
	i := slices.IndexFunc(broken, func(b brokenCase) bool { return b.name == name })
	if i < 0 {
		t.Fatalf("no broken publisher %q", name)
	}
	publishertest.Run(t, rmqtestTarget(t, func(p relay.Publisher) relay.Publisher {
		return brokenPublisher{Publisher: p, send: broken[i].send}
	}))
}

// TestSuiteFailsBrokenPublishers: the suite fails each broken publisher, in the subtests
// that pin the promise it breaks. Each runs in a test process of its own, so that its
// failures are real test failures that this test reads.
func TestSuiteFailsBrokenPublishers(t *testing.T) {
	failed := regexp.MustCompile(`--- FAIL: TestBrokenPublisher/(\S+)`)
	for _, b := range broken {
		t.Run(b.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenPublisher$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+b.name)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passed on publisher %s, or did not run (%v):\n%s", b.name, err, out)
			}
			var got []string
			for _, m := range failed.FindAllStringSubmatch(string(out), -1) {
				got = append(got, m[1])
			}
			for _, want := range b.fails {
				if !slices.Contains(got, want) {
					t.Errorf("publisher %s: subtest %s passed; failed: %q", b.name, want, got)
				}
			}
			t.Logf("publisher %s fails: %q", b.name, got)
		})
	}
}
