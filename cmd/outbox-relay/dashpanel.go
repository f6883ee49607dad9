// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/dashboard"
	"github.com/outbox-relay/outbox-relay/relay"
)

// brokerPanel returns the dashboard's broker panel: the publisher's brokers and name servers,
// and each table's open incidents and refused topics (one line per table, the earliest of
// its partitions' relays). accessKey is named; the secret key never is.
func brokerPanel(pub *relay.RocketMQPublisher, dbs []*runDatabase, accessKey string) func(context.Context) dashboard.BrokerPanel {
	return func(ctx context.Context) dashboard.BrokerPanel {
		p := dashboard.BrokerPanel{NameServers: pub.NameServerStates(ctx), Brokers: pub.BrokerStates(),
			Incidents: []dashboard.TableIncident{}, Refusals: []dashboard.TableRefusal{}, AccessKey: accessKey}
		for _, d := range dbs {
			incidents := map[[2]string]int{} // table, broker -> index in p.Incidents
			refusals := map[[2]string]int{}
			for _, rl := range d.relays {
				brokers, topics := rl.Incidents()
				for _, b := range brokers {
					k := [2]string{rl.Table(), b.Broker}
					if i, ok := incidents[k]; ok {
						if b.Since.Before(p.Incidents[i].Since) {
							p.Incidents[i].BrokerIncident = b
						}
						continue
					}
					incidents[k] = len(p.Incidents)
					p.Incidents = append(p.Incidents, dashboard.TableIncident{Database: d.Name, Table: rl.Table(), BrokerIncident: b})
				}
				for _, t := range topics {
					k := [2]string{rl.Table(), t.Topic}
					if i, ok := refusals[k]; ok {
						if t.Since.Before(p.Refusals[i].Since) {
							p.Refusals[i].TopicRefusal = t
						}
						continue
					}
					refusals[k] = len(p.Refusals)
					p.Refusals = append(p.Refusals, dashboard.TableRefusal{Database: d.Name, Table: rl.Table(), TopicRefusal: t})
				}
			}
		}
		return p
	}
}
