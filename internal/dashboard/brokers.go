// SPDX-License-Identifier: Apache-2.0

package dashboard

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/relay/rocketmq"
)

// BrokerPanel is what the relay knows of RocketMQ: its name servers (probed), the brokers it
// sent to, each table's open broker incidents and the topics refused for its configuration.
type BrokerPanel struct {
	NameServers []rocketmq.BrokerState `json:"name_servers"`
	Brokers     []rocketmq.BrokerState `json:"brokers"`
	Incidents   []TableIncident        `json:"incidents"`
	Refusals    []TableRefusal         `json:"refusals"`
	// AccessKey is the ACL access key the relay signs with ("" for none); the secret key is
	// never part of the panel.
	AccessKey string `json:"access_key"`
}

// TableIncident is a broker incident of one table's relay.
type TableIncident struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	relay.BrokerIncident
}

// TableRefusal is a topic of one table refused for the relay's configuration.
type TableRefusal struct {
	Database string `json:"database"`
	Table    string `json:"table"`
	relay.TopicRefusal
}

// BrokersAnswer is the answer of GET /ui/api/brokers.
type BrokersAnswer struct {
	BrokerPanel
	Now time.Time `json:"now"`
	// Known is false when the process serving the page does not publish (no panel given).
	Known bool `json:"known"`
}

// brokerCache keeps the panel for CacheFor: each computation probes the name servers.
type brokerCache struct {
	mu  sync.Mutex
	at  time.Time
	ans BrokersAnswer
}

func (d *Dashboard) handleBrokers(w http.ResponseWriter, r *http.Request) {
	d.brokers.mu.Lock()
	defer d.brokers.mu.Unlock()
	if d.brokers.at.IsZero() || time.Since(d.brokers.at) >= d.cfg.CacheFor {
		ans := BrokersAnswer{Now: time.Now().UTC(), BrokerPanel: BrokerPanel{NameServers: []rocketmq.BrokerState{},
			Brokers: []rocketmq.BrokerState{}, Incidents: []TableIncident{}, Refusals: []TableRefusal{}}}
		if d.cfg.Brokers != nil {
			// Not the request's context: a page that goes away must not make the probes
			// fail, and every page within CacheFor shares the answer.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 3*time.Second)
			ans.BrokerPanel, ans.Known = d.cfg.Brokers(ctx), true
			cancel()
		}
		d.brokers.ans, d.brokers.at = d.redactPanel(ans), time.Now()
	}
	writeJSON(w, http.StatusOK, d.brokers.ans)
}

// redactPanel removes every configured secret from the panel's texts (an error quoting a
// signature or a DSN, say): the panel is served without a token.
func (d *Dashboard) redactPanel(a BrokersAnswer) BrokersAnswer {
	var pairs []string
	for _, s := range d.cfg.Secrets {
		if len(s) >= 4 {
			pairs = append(pairs, s, "[redacted]")
		}
	}
	if len(pairs) == 0 {
		return a
	}
	rp := strings.NewReplacer(pairs...)
	for _, list := range [][]rocketmq.BrokerState{a.NameServers, a.Brokers} {
		for i := range list {
			list[i].LastError = rp.Replace(list[i].LastError)
		}
	}
	for i := range a.Incidents {
		a.Incidents[i].LastError = rp.Replace(a.Incidents[i].LastError)
	}
	for i := range a.Refusals {
		a.Refusals[i].LastError = rp.Replace(a.Refusals[i].LastError)
	}
	return a
}

// CountersView is one table's activity as this relay counted it, per minute.
type CountersView struct {
	Database string                 `json:"database"`
	Table    string                 `json:"table"`
	Minutes  []relay.MinuteActivity `json:"minutes"`
	Sent     int64                  `json:"sent"`
	Failed   int64                  `json:"failed"`
	Dead     int64                  `json:"dead"`
}

// handleCounters answers GET /ui/api/counters: every table's last hour as this relay's
// own counters have it (relay.Metrics.Activity), the source of the page's chart.
func (d *Dashboard) handleCounters(w http.ResponseWriter, _ *http.Request) {
	out := []CountersView{}
	for _, s := range d.sources {
		for _, t := range s.Tables {
			v := CountersView{Database: s.Name, Table: t, Minutes: []relay.MinuteActivity{}}
			if s.Activity != nil {
				if m := s.Activity(t); m != nil {
					v.Minutes = m
				}
			}
			for _, m := range v.Minutes {
				v.Sent, v.Failed, v.Dead = v.Sent+m.Sent, v.Failed+m.Failed, v.Dead+m.Dead
			}
			out = append(out, v)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// routeExplorer adds the explorer's, the broker panel's and the counters' routes.
func (d *Dashboard) routeExplorer() {
	d.mux.HandleFunc("GET /ui/api/search", d.handleSearch)
	d.mux.HandleFunc("GET /ui/api/row", d.handleRow)
	d.mux.HandleFunc("GET /ui/api/brokers", d.handleBrokers)
	d.mux.HandleFunc("GET /ui/api/counters", d.handleCounters)
	d.mux.HandleFunc("GET /ui/api/audit", d.handleAudit)
}
