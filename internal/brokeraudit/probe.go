// SPDX-License-Identifier: Apache-2.0

package brokeraudit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
)

// Probe asks, for each probe topic, every master of its route to serve a pull of the kind a
// Check sends; a topic without a route is passed over, unless every one is. It returns nil
// when every master answered, and otherwise an error naming what refused and why (a 5.x
// proxy that does not serve pulls, a user without the right to read, a consumer group the
// broker will not create, a broker that does not answer).
func (r *RocketMQ) Probe(ctx context.Context) error {
	var problems []string
	routed := 0
	for _, topic := range r.cfg.ProbeTopics {
		rt, err := r.route(ctx, topic)
		if errors.Is(err, remoting.ErrNoRoute) {
			// A topic not created yet: nothing of it was sent, so nothing to ask (check lists
			// it as missing). The others say whether the brokers can be asked.
			continue
		}
		if err != nil {
			return fmt.Errorf("the brokers cannot be asked: route of %s: %w", topic, err)
		}
		routed++
		names := make([]string, 0, len(rt.Masters))
		for name := range rt.Masters {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			if err := r.probeBroker(ctx, topic, name, rt.Masters[name]); err != nil {
				problems = append(problems, fmt.Sprintf("broker %s at %s: %s", name, rt.Masters[name], explain(err, r.cfg.Group)))
			}
		}
		if len(names) == 0 {
			problems = append(problems, fmt.Sprintf("the route of %s names no master", topic))
		}
	}
	if routed == 0 {
		problems = append(problems, fmt.Sprintf("no topic to probe has a route (%s)", strings.Join(r.cfg.ProbeTopics, ", ")))
	}
	if len(problems) > 0 {
		return fmt.Errorf("the brokers cannot be asked: %s", strings.Join(problems, "; "))
	}
	return nil
}

// probeBroker pulls one message of queue 0 of topic from broker at addr.
func (r *RocketMQ) probeBroker(ctx context.Context, topic, broker, addr string) error {
	bc := r.dial(ctx, addr)
	defer bc.close()
	if bc.err != nil {
		return bc.err
	}
	pctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	r.requests.Add(1)
	_, err := bc.c.PullFrom(pctx, broker, r.cfg.Group, topic, 0, 0, 1)
	return err
}

// explain says what an operator can do about a probe's error.
func explain(err error, group string) string {
	switch {
	case errors.Is(err, remoting.ErrNotSupported):
		return fmt.Sprintf("does not serve pulls (a 5.x proxy's remoting port, say): give the audit the brokers' name servers, not the proxy (%v)", err)
	case errors.Is(err, remoting.ErrNoPermission):
		return fmt.Sprintf("refuses the audit's user: it needs to read (Sub) the topics and the group %s (%v)", group, err)
	case strings.Contains(err.Error(), "code 26:"):
		return fmt.Sprintf("has no subscription group %s and does not create one: create it (mqadmin updateSubGroup -g %s) (%v)", group, group, err)
	}
	return err.Error()
}
