// SPDX-License-Identifier: Apache-2.0

package pipeline

import (
	"sort"
	"time"
)

// BrokerIncident is a broker (by address, or "cluster" when no broker was reached: no name
// server, no route) whose failures a relay is not counting against its messages: their rows
// wait for it, no retry spent.
type BrokerIncident struct {
	Broker string    `json:"broker"`
	Since  time.Time `json:"since"`
	// LastError is the last failure of the incident.
	LastError string `json:"last_error"`
	// Rounds is how many pages in a row failed on it: the deferral doubles with each.
	Rounds int `json:"rounds"`
}

// TopicRefusal is a topic whose sends the broker refuses for the relay's configuration (ACL
// permission or credentials, topic type): its rows wait, none goes dead.
type TopicRefusal struct {
	Topic     string    `json:"topic"`
	Since     time.Time `json:"since"`
	LastError string    `json:"last_error"`
}

// Incidents returns the relay's open broker incidents and refused topics, sorted. It is safe
// to call from any goroutine.
func (r *Engine) Incidents() ([]BrokerIncident, []TopicRefusal) {
	in := r.incidents
	in.mu.Lock()
	defer in.mu.Unlock()
	brokers := make([]BrokerIncident, 0, len(in.failing))
	for k, st := range in.failing {
		brokers = append(brokers, BrokerIncident{Broker: k, Since: st.since, LastError: st.last, Rounds: st.rounds})
	}
	topics := make([]TopicRefusal, 0, len(in.misconfigured))
	for t, st := range in.misconfigured {
		topics = append(topics, TopicRefusal{Topic: t, Since: st.since, LastError: st.last})
	}
	sort.Slice(brokers, func(i, j int) bool { return brokers[i].Broker < brokers[j].Broker })
	sort.Slice(topics, func(i, j int) bool { return topics[i].Topic < topics[j].Topic })
	return brokers, topics
}
