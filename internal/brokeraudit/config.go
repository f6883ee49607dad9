// SPDX-License-Identifier: Apache-2.0

package brokeraudit

import (
	"context"
	"fmt"

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

// CanAsk says whether the audit can ask the brokers of a relay's configuration about
// topics: nil when every broker of their routes serves the audit's pulls, otherwise why not.
func CanAsk(ctx context.Context, mq config.RocketMQ, topics []string) error {
	if err := ForRelay(mq, topics).Probe(ctx); err != nil {
		return fmt.Errorf("%w; the audit cannot find messages the brokers lost (it never counts what it cannot ask as lost)", err)
	}
	return nil
}
