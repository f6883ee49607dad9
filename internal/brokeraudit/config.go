// SPDX-License-Identifier: Apache-2.0

package brokeraudit

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/remoting"
)

// ForRelay returns the RocketMQ lookup of a relay's configuration: its name servers,
// credentials and TLS, probing topics (named as in the routes; the namespace is added). With
// no topic it probes SELF_TEST_TOPIC, which every broker holds.
func ForRelay(mq config.RocketMQ, topics []string) *RocketMQ {
	probe := make([]string, 0, len(topics))
	for _, t := range topics {
		if mq.Namespace != "" {
			t = mq.Namespace + "%" + t
		}
		probe = append(probe, t)
	}
	return NewRocketMQ(RocketMQConfig{
		NameServers: mq.NameServers,
		Credentials: remoting.Credentials{AccessKey: mq.AccessKey, SecretKey: mq.SecretKey},
		TLS:         mq.TLS.Enable,
		ProbeTopics: probe,
	})
}

// ForConfig returns the broker audit's lookup of a relay's configuration: ForRelay with the
// topics its routes name literally (a pattern cannot be probed; with none, SELF_TEST_TOPIC).
// `outbox-relay check`, the audit service and `outbox-relay audit` all ask through it, so they
// probe the same brokers.
func ForConfig(cfg config.Config) *RocketMQ {
	var topics []string
	for _, r := range cfg.Routes {
		if !strings.ContainsAny(r.Topic, `*?[\`) && !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	return ForRelay(cfg.RocketMQ, topics)
}

// CanAsk says whether the broker audit can ask l's brokers: nil when every broker it probes
// serves the audit's pulls, otherwise why not. It is the one verdict `outbox-relay check`,
// the audit service at start (and the dashboard) and `outbox-relay audit` report, word for
// word.
func CanAsk(ctx context.Context, l Lookup) error {
	if err := l.Probe(ctx); err != nil {
		return fmt.Errorf("%w; the audit cannot find messages the brokers lost (it never counts what it cannot ask as lost)", err)
	}
	return nil
}
