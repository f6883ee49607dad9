// SPDX-License-Identifier: Apache-2.0

package brokeraudit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
)

// PropMsgID is the property every message the relay sends carries: the row's msg_id.
const PropMsgID = "OUTBOX_MSG_ID"

// RocketMQConfig configures a RocketMQ lookup. Only NameServers is required.
type RocketMQConfig struct {
	// NameServers are the name servers' host:port addresses, asked in turn for routes.
	NameServers []string
	// Credentials sign every request (brokers with ACL). The user needs to read (Sub) the
	// topics and the Group.
	Credentials remoting.Credentials
	// TLS encrypts every connection, unverified as the relay's client does.
	TLS bool
	// Group is the consumer group the lookup pulls as; it never commits an offset. Defaults
	// to "outbox-relay-audit".
	Group string
	// Timeout bounds each request to a name server or broker. Defaults to 3 seconds.
	Timeout time.Duration
	// PullBatch is the most messages one pull asks for (RocketMQ sends at most 32 from
	// memory, 8 from disk). Defaults to 32.
	PullBatch int
	// Retention is the brokers' fileReservedTime: a message sent longer ago than this may
	// have been deleted by the broker's retention, so its absence from the head of a queue
	// is Unknown, not Missing. Defaults to 72 hours, RocketMQ's default.
	Retention time.Duration
	// Now is the clock SentAt is compared with (the database's, as SentAt is). Defaults to
	// time.Now.
	Now func() time.Time
	// ProbeTopics are the topics Probe asks about. Defaults to SELF_TEST_TOPIC, which every
	// RocketMQ broker holds.
	ProbeTopics []string
}

// RocketMQ is a Lookup that asks Apache RocketMQ's brokers, found through the name servers'
// routes, with pulls of the recorded queues (one pull covers up to PullBatch offsets) and,
// for a message not where it was recorded, a look at its offset message id.
type RocketMQ struct {
	cfg RocketMQConfig
}

var _ Lookup = (*RocketMQ)(nil)

// NewRocketMQ returns a lookup with cfg's defaults filled in.
func NewRocketMQ(cfg RocketMQConfig) *RocketMQ {
	if cfg.Group == "" {
		cfg.Group = "outbox-relay-audit"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 3 * time.Second
	}
	if cfg.PullBatch <= 0 || cfg.PullBatch > 32 {
		cfg.PullBatch = 32
	}
	if cfg.Retention <= 0 {
		cfg.Retention = 72 * time.Hour
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if len(cfg.ProbeTopics) == 0 {
		cfg.ProbeTopics = []string{"SELF_TEST_TOPIC"}
	}
	return &RocketMQ{cfg: cfg}
}

func (r *RocketMQ) opts() []remoting.Option {
	return []remoting.Option{remoting.WithCredentials(r.cfg.Credentials), remoting.WithTLS(r.cfg.TLS)}
}

// route asks the name servers in turn for topic's route. A name server's "no route" is
// final; an error from every one of them is returned.
func (r *RocketMQ) route(ctx context.Context, topic string) (*remoting.Route, error) {
	if len(r.cfg.NameServers) == 0 {
		return nil, errors.New("brokeraudit: no name server configured")
	}
	var errs []error
	for _, ns := range r.cfg.NameServers {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
		rt, err := remoting.TopicRoute(rctx, ns, topic, r.opts()...)
		cancel()
		if err == nil || errors.Is(err, remoting.ErrNoRoute) {
			return rt, err
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("brokeraudit: no name server answered for %s: %w", topic, errors.Join(errs...))
}

// queueKey is one queue of one broker: the unit a Check reads with pulls.
type queueKey struct {
	broker, addr, topic string
	queue               int
}

// Check answers for each position, in order: positions are grouped by broker and queue, each
// queue read from the lowest recorded offset up with pulls of up to PullBatch messages. The
// only error is that no name server answered at all.
func (r *RocketMQ) Check(ctx context.Context, ps []Position) ([]Finding, error) {
	out := make([]Finding, len(ps))
	groups, err := r.group(ctx, ps, out)
	if err != nil {
		return nil, err
	}
	keys := make([]queueKey, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b queueKey) int {
		return cmp.Or(cmp.Compare(a.addr, b.addr), cmp.Compare(a.topic, b.topic), cmp.Compare(a.queue, b.queue))
	})
	conns := map[string]*brokerConn{}
	defer func() {
		for _, bc := range conns {
			bc.close()
		}
	}()
	for _, k := range keys {
		bc := conns[k.addr]
		if bc == nil {
			bc = r.dial(ctx, k.addr)
			conns[k.addr] = bc
		}
		q := &queueCheck{r: r, bc: bc, key: k, ps: ps, out: out}
		q.run(ctx, groups[k])
	}
	return out, nil
}

// group resolves each position's broker through its topic's route and groups the positions
// per queue; positions that cannot be placed get their Unknown finding in out. Name servers
// that do not answer are an error: nothing can be checked.
func (r *RocketMQ) group(ctx context.Context, ps []Position, out []Finding) (map[queueKey][]int, error) {
	routes := map[string]*remoting.Route{}
	groups := map[queueKey][]int{}
	for i, p := range ps {
		rt, seen := routes[p.Topic]
		if !seen {
			var err error
			rt, err = r.route(ctx, p.Topic)
			if err != nil && !errors.Is(err, remoting.ErrNoRoute) {
				return nil, err
			}
			routes[p.Topic] = rt
		}
		switch {
		case rt == nil:
			out[i] = Finding{Unknown, fmt.Sprintf("topic %s has no route on the name servers", p.Topic)}
		case rt.Masters[p.Broker] == "":
			out[i] = Finding{Unknown, fmt.Sprintf("broker %s is not in the route of %s any more (or has no master)", p.Broker, p.Topic)}
		default:
			k := queueKey{broker: p.Broker, addr: rt.Masters[p.Broker], topic: p.Topic, queue: p.QueueID}
			groups[k] = append(groups[k], i)
		}
	}
	return groups, nil
}
