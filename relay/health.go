// SPDX-License-Identifier: Apache-2.0

package relay

import (
	"time"

	"github.com/outbox-relay/outbox-relay/relay/internal/pipeline"
)

// Health is what a relay reports about itself for health checks.
type Health struct {
	// Leader is true while the relay holds the table's lock, certainly (its validity has not
	// run out), and publishes.
	Leader bool
	// SinceProgress is how long ago the database last answered the relay.
	SinceProgress time.Duration
	// Stalled is true when the leader has left a statement unanswered, with no answer
	// since, or its writes have been refused (a read-only server, write-backs failing), for
	// StallTimeout. A leader waiting on a slow broker is not stalled.
	Stalled bool
	// WritesRefused is how long the database has refused the leader's writes; 0 when it
	// accepts them.
	WritesRefused time.Duration
	// LockWait is how long a standby has been waiting for the lock; 0 while leader.
	LockWait time.Duration
	// FailingBrokers are the brokers in an incident and since when.
	FailingBrokers map[string]time.Time
	// MisconfiguredTopics are the topics whose sends are refused for the relay's
	// configuration (ACL permission or credentials, message type), with the last refusal.
	MisconfiguredTopics map[string]string
}

// Health reports the relay's state. It is safe to call from any goroutine.
func (r *Relay) Health() Health {
	h := Health{
		Leader:              r.leading.Load() && r.lease.Valid(),
		SinceProgress:       r.eng.Progress().Since(),
		FailingBrokers:      r.eng.FailingBrokers(),
		MisconfiguredTopics: r.eng.MisconfiguredTopics(),
	}
	h.Stalled = h.Leader && r.eng.Progress().StalledFor() > r.cfg.StallTimeout
	if h.Leader {
		h.WritesRefused = r.eng.Progress().RefusingFor()
	}
	if ws := r.waitingSince.Load(); ws != 0 && !h.Leader {
		h.LockWait = time.Since(r.eng.Progress().Start()) - time.Duration(ws)
	}
	return h
}

type (
	// BrokerIncident is a broker in an incident (pipeline.BrokerIncident).
	BrokerIncident = pipeline.BrokerIncident
	// TopicRefusal is a topic refused for the relay's configuration (pipeline.TopicRefusal).
	TopicRefusal = pipeline.TopicRefusal
)

// Incidents returns the relay's open broker incidents and refused topics, sorted. It is safe
// to call from any goroutine.
func (r *Relay) Incidents() ([]BrokerIncident, []TopicRefusal) { return r.eng.Incidents() }
