// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"regexp"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/dashboard"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// brokerPanel returns the dashboard's broker panel: the publisher's brokers and name servers,
// and each table's open incidents and refused topics (one line per table, the earliest of
// its partitions' relays). accessKey is named; the secret key never is.
func brokerPanel(pub *rocketmq.Publisher, dbs []*runDatabase, accessKey string, upstream func(string) (string, bool)) func(context.Context) dashboard.BrokerPanel {
	return func(ctx context.Context) dashboard.BrokerPanel {
		return upstreamPanel(tablePanel(ctx, pub, dbs, accessKey), upstream)
	}
}

// tablePanel is the broker panel as the publisher and the relays of dbs know it.
func tablePanel(ctx context.Context, pub *rocketmq.Publisher, dbs []*runDatabase, accessKey string) dashboard.BrokerPanel {
	p := dashboard.BrokerPanel{NameServers: pub.NameServerStates(ctx), Brokers: pub.BrokerStates(),
		Incidents: []dashboard.TableIncident{}, Refusals: []dashboard.TableRefusal{}, AccessKey: accessKey}
	for _, d := range dbs {
		incidents := map[[2]string]int{} // table, broker -> index in p.Incidents
		refusals := map[[2]string]int{}
		for _, rl := range d.relays {
			brokers, topics := rl.Incidents()
			for _, b := range brokers {
				keepEarliest(&p.Incidents, incidents, [2]string{rl.Table(), b.Broker},
					dashboard.TableIncident{Database: d.Name, Table: rl.Table(), BrokerIncident: b},
					func(x dashboard.TableIncident) time.Time { return x.Since })
			}
			for _, t := range topics {
				keepEarliest(&p.Refusals, refusals, [2]string{rl.Table(), t.Topic},
					dashboard.TableRefusal{Database: d.Name, Table: rl.Table(), TopicRefusal: t},
					func(x dashboard.TableRefusal) time.Time { return x.Since })
			}
		}
	}
	return p
}

// loopbackAddr matches a loopback host:port, as the verifying TLS bridge listens on.
var loopbackAddr = regexp.MustCompile(`127\.0\.0\.1:[0-9]{1,5}`)

// upstreamPanel replaces, in every address and text of p, each loopback address of the
// verifying TLS bridge (rocketmq.tls with verification) by the server's address it forwards
// to: the operator sees the brokers and name servers, not the bridge. upstream nil (no
// bridge) leaves p as it is.
func upstreamPanel(p dashboard.BrokerPanel, upstream func(string) (string, bool)) dashboard.BrokerPanel {
	if upstream == nil {
		return p
	}
	tr := func(s string) string {
		return loopbackAddr.ReplaceAllStringFunc(s, func(local string) string {
			if up, ok := upstream(local); ok {
				return up
			}
			return local
		})
	}
	for _, list := range [][]rocketmq.BrokerState{p.NameServers, p.Brokers} {
		for i := range list {
			list[i].Addr, list[i].LastError = tr(list[i].Addr), tr(list[i].LastError)
		}
	}
	for i := range p.Incidents {
		p.Incidents[i].Broker, p.Incidents[i].LastError = tr(p.Incidents[i].Broker), tr(p.Incidents[i].LastError)
	}
	for i := range p.Refusals {
		p.Refusals[i].LastError = tr(p.Refusals[i].LastError)
	}
	return p
}

// keepEarliest adds item to list under key, or, when key is there already (another partition's
// relay of the same table), keeps the one that started first.
func keepEarliest[T any](list *[]T, seen map[[2]string]int, key [2]string, item T, since func(T) time.Time) {
	if i, ok := seen[key]; ok {
		if since(item).Before(since((*list)[i])) {
			(*list)[i] = item
		}
		return
	}
	seen[key] = len(*list)
	*list = append(*list, item)
}
